"""``batchloaders.read_record`` and ``preview CONFIG --record FILE:N`` on real TFRecord files: exact values.

Example files: record r of file f holds id = 100 * f + r, x = [id, id + 0.5] and (raw uint8 [2, 3]) six bytes
of id % 256; files hold 3, 0 and 5 records. SequenceExample files: context id, and r + 1 steps of frames
holding [id + step]. Every decoded value therefore says which record was read.
"""
from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest

import batchloaders
from batchloaders.cli.main import main
from batchloaders.errors import BatchLoaderError, ConfigError, DataError, ManifestError
from conftest import example, feature, loader_config, sequence_example, write_manifest, write_records

SIZES = (3, 0, 5)
FEATURES = [feature("id", "int64", [], "int"), feature("x", "float32", [2], "float"),
            feature("img", "uint8", [2, 3], "raw", endian="little")]
SEQ_FEATURES = [feature("id", "int64", [], "int", var_len=False),
                feature("frames", "float32", [1], "float", var_len=True)]
FIRST_MIDDLE_LAST = [(0, 0), (0, 1), (0, 2), (2, 0), (2, 2), (2, 4)]


def record(f: int, r: int) -> bytes:
    i = 100 * f + r
    return example(id=("int", [i]), x=("float", [i, i + 0.5]), img=("string", [bytes([i % 256] * 6)]))


def seq_record(f: int, r: int) -> bytes:
    i = 100 * f + r
    return sequence_example({"id": ("int", [i])}, {"frames": ("float", [[i + s] for s in range(r + 1)])})


def cli(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    with pytest.raises(SystemExit) as done:
        main(list(args))
    captured = capsys.readouterr()
    return done.value.code, captured.out.splitlines(), captured.err.splitlines()


@pytest.fixture
def examples(tmp_path):
    d = tmp_path / "d"
    write_manifest(d, FEATURES)
    for f, n in enumerate(SIZES):
        write_records(d / f"part-{f}.tfrecords", [record(f, r) for r in range(n)])
    return str(d)


@pytest.fixture
def sequences(tmp_path):
    d = tmp_path / "s"
    write_manifest(d, SEQ_FEATURES, allow_var_len=True)
    for f, n in enumerate(SIZES):
        write_records(d / f"part-{f}.tfrecords", [seq_record(f, r) for r in range(n)])
    return str(d)


def stepped(d: str) -> dict:
    """Independent: id read as label, x sliced to its last value, img as is, and a const secondary feature."""
    return loader_config(d, [("id", "label"), ("x", "x"), ("img", "img")], inputs=["x", "img", "k"],
                         targets=["label"], processing_steps=[{"tensor": "x", "type": "slice",
                                                               "args": {"slice": "[1:]"}}],
                         secondary_features=[{"to_name": "k", "type": "const",
                                              "args": {"shape": [], "dtype": "int32", "value": 7}}])


def index(d: str, capsys) -> None:
    assert cli(capsys, "index", d)[0] == 0


def expected(f: int, r: int) -> dict:
    i = 100 * f + r
    return {"label": np.int64(i), "x": np.array([i + 0.5], np.float32), "img": np.full([2, 3], i % 256, np.uint8),
            "k": np.int32(7)}


def same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].dtype == np.asarray(want[name]).dtype, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize("indexed", [True, False], ids=["index", "sequential"])
def test_read_record_decodes_as_the_loader_does(examples, capsys, indexed):
    if indexed:
        index(examples, capsys)
    else:  # without an index, the counts only
        assert cli(capsys, "manifest", examples)[0] == 0
    config = batchloaders.load_config(stepped(examples))
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        for f, r in FIRST_MIDDLE_LAST:
            same(batchloaders.read_record(config, f"part-{f}.tfrecords", r), expected(f, r))
            same(batchloaders.read_record(config, os.path.join(examples, f"part-{f}.tfrecords"), r), expected(f, r))
    assert bool(told) is not indexed
    # The global form: the files in order, part-1 empty, so record 3 is part-2's first.
    for i, (f, r) in enumerate([(0, 0), (0, 1), (0, 2), (2, 0), (2, 1), (2, 2), (2, 3), (2, 4)]):
        same(batchloaders.read_record(config, index=i), expected(f, r))


def test_what_the_loader_gives_is_what_read_record_gives(examples, capsys):
    index(examples, capsys)
    config = stepped(examples)
    batches = list(batchloaders.build_input_fn(config)().as_numpy_iterator())
    features = {k: np.concatenate([b[0][k] for b in batches]) for k in ("x", "img", "k")}
    labels = np.concatenate([b[1]["label"] for b in batches])
    for i in range(8):
        got = batchloaders.read_record(config, index=i)
        np.testing.assert_array_equal(got["x"], features["x"][i])
        np.testing.assert_array_equal(got["img"], features["img"][i])
        assert got["k"] == features["k"][i] and got["label"] == labels[i]


def test_out_of_range_names_the_file_and_its_count(examples, capsys):
    index(examples, capsys)
    config = batchloaders.load_config(stepped(examples))
    part = os.path.join(examples, "part-{}.tfrecords")
    with pytest.raises(DataError, match=rf"^{part.format(2)}: record 5: found record number 5: the file holds 5 "
                                        r"records: expected 0 to 4$"):
        batchloaders.read_record(config, "part-2.tfrecords", 5)
    with pytest.raises(DataError, match=rf"^{part.format(1)}: record 0: found record number 0: the file holds no "
                                        r"record$"):
        batchloaders.read_record(config, "part-1.tfrecords", 0)
    with pytest.raises(DataError, match="found record index 8: the dataset holds 8 records in 3 files: expected 0 "
                                        "to 7"):
        batchloaders.read_record(config, index=8)
    with pytest.raises(ConfigError, match="found 'part-9.tfrecords' .*which is not one of the dataset's 3 data files"):
        batchloaders.read_record(config, "part-9.tfrecords", 0)


def test_out_of_range_without_a_manifest_count(examples):
    config = batchloaders.load_config(stepped(examples))
    with pytest.raises(DataError, match=r"part-2.tfrecords: record 6: found record number 6: the file holds 5 "
                                        r"records: expected 0 to 4$"):
        batchloaders.read_record(config, "part-2.tfrecords", 6)
    with pytest.raises(ConfigError, match="the manifest lists no record count for .*part-0.tfrecords"):
        batchloaders.read_record(config, index=0)


def test_a_stale_index_stops_read_record(examples, capsys):
    index(examples, capsys)
    os.remove(os.path.join(examples, "part-2.tfrecords.index"))
    config = batchloaders.load_config(stepped(examples))
    with pytest.raises(ManifestError, match="part-2.tfrecords.index: the index file is missing"):
        batchloaders.read_record(config, "part-2.tfrecords", 1)


def test_sequence_records_independent_and_discrete(sequences, capsys):
    index(sequences, capsys)
    independent = loader_config(sequences, [("id", "id"), ("frames", "frames")], inputs=["frames", "n"],
                                targets=["id"], padding=True,
                                secondary_features=[{"to_name": "n", "type": "length", "args": {"tensor": "frames"}}])
    discrete = loader_config(sequences, [("id", "id"), ("frames", "frames")], inputs=["frames"], targets=["id"],
                             loader="discrete_sequence", padding=True, min_window=1, max_window=2)
    for f, r in FIRST_MIDDLE_LAST:
        i = 100 * f + r
        frames = np.array([[i + s] for s in range(r + 1)], np.float32)
        same(batchloaders.read_record(independent, f"part-{f}.tfrecords", r),
             {"id": np.int64(i), "frames": frames, "n": np.int32(r + 1)})
        same(batchloaders.read_record(discrete, f"part-{f}.tfrecords", r), {"id": np.int64(i), "frames": frames})


def test_preview_record(examples, monkeypatch, capsys):
    config = os.path.join(os.path.dirname(examples), "c.json")
    with open(config, "w") as f:
        json.dump(stepped(examples), f)
    monkeypatch.chdir(os.path.dirname(examples))
    code, out, err = cli(capsys, "preview", "c.json", "--record", "part-2.tfrecords:4")
    assert code == 0, err
    head = ["config: c.json",
            "record 4 of d/part-2.tfrecords (read from the start of the file: `batchloaders index` makes reading a record instant)"]
    values = ["  label: int64 []: 204", "  x: float32 [1]: [204.5]", "  img: uint8 [2, 3]: [[204, 204, 204], "
              "[204, 204, 204]]", "  k: int32 []: 7"]
    assert out == head + values
    index("d", capsys)
    code, out, _ = cli(capsys, "preview", "c.json", "--record", "3")  # the dataset's 4th record: part-2's first
    assert code == 0
    assert out == ["config: c.json", "record 0 of d/part-2.tfrecords (read at its offset through the record index)",
                   "  label: int64 []: 200", "  x: float32 [1]: [200.5]",
                   "  img: uint8 [2, 3]: [[200, 200, 200], [200, 200, 200]]", "  k: int32 []: 7"]
    code, out, err = cli(capsys, "preview", "c.json", "--record", "part-1.tfrecords:0")
    assert (code, out) == (1, [])
    assert err == [f"batchloaders preview: error: {os.path.join(examples, 'part-1.tfrecords')}: record 0: found "
                   "record number 0: the file holds no record"]
    code, _, err = cli(capsys, "preview", "c.json", "--record", "part-1.tfrecords:x")
    assert code == 2 and "expected FILE:N" in err[0]


def test_read_frame_checks_the_payload(examples, capsys):
    index(examples, capsys)
    path = os.path.join(examples, "part-0.tfrecords")
    data = bytearray(open(path, "rb").read())
    data[12 + 3] ^= 1  # a byte of record 0's payload
    open(path, "wb").write(bytes(data))
    config = batchloaders.load_config(stepped(examples))
    with pytest.raises(DataError, match="record 0: at byte 0: its payload's checksum is wrong"):
        batchloaders.read_record(config, "part-0.tfrecords", 0)


@pytest.mark.parametrize("indexed", [True, False], ids=["index", "sequential"])
def test_a_record_that_is_no_protobuf_is_a_data_error_naming_it(tmp_path, capsys, indexed):
    d = tmp_path / "d"
    write_manifest(d, FEATURES)
    write_records(d / "part-0.tfrecords", [record(0, 0), b"\xff\xff\xff\xff", record(0, 2)])
    if indexed:
        index(str(d), capsys)
    config = batchloaders.load_config(stepped(str(d)))
    same(batchloaders.read_record(config, "part-0.tfrecords", 2), expected(0, 2))
    with pytest.raises(DataError) as caught:
        batchloaders.read_record(config, "part-0.tfrecords", 1)
    assert str(caught.value) == (f"{d / 'part-0.tfrecords'}: record 1: found bytes TensorFlow cannot parse as the "
                                 "manifest's features: expected a serialized tf.train.Example (not a protobuf)")


@pytest.mark.parametrize("indexed", [True, False], ids=["index", "sequential"])
def test_a_data_file_gone_after_the_config_was_loaded_is_a_located_error(examples, capsys, indexed):
    if indexed:
        index(examples, capsys)
    config = batchloaders.load_config(stepped(examples))
    os.remove(os.path.join(examples, "part-2.tfrecords"))
    with pytest.raises(BatchLoaderError) as caught:
        batchloaders.read_record(config, "part-2.tfrecords", 1)
    assert os.path.join(examples, "part-2.tfrecords") in str(caught.value)
    assert "No such file" in str(caught.value) or "cannot be opened" in str(caught.value), str(caught.value)
