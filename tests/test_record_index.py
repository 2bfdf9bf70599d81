"""The record index: its format on real TFRecord files, ``batchloaders index``, stale indexes, verify's lines.

Record r of file f holds id = 100 * f + r and a note of r + 1 bytes, so records differ in size and
every offset is checked against the frames the records make (conftest.frame_offsets).
Commands run in-process from tmp_path, so printed paths are relative (d/part-1.tfrecords).
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

from batchloaders.cli.main import main
from batchloaders.config.manifest import load_manifest
from batchloaders.errors import ManifestError
from batchloaders.read import record_index
from conftest import example, feature, frame_offsets, loader_config, write_manifest, write_records

FEATURES = [feature("id", "int64", [], "int"), feature("note", "string", [], "string")]
SIZES = (3, 0, 5)  # records per file: part-1 is empty


def record(f: int, r: int) -> bytes:
    return example(id=("int", [100 * f + r]), note=("string", [b"n" * (r + 1)]))


def records(f: int) -> list[bytes]:
    return [record(f, r) for r in range(SIZES[f])]


def dataset(tmp_path, compression=None) -> str:
    d = tmp_path / "d"
    write_manifest(d, FEATURES, compression=compression)
    for f in range(len(SIZES)):
        write_records(d / f"part-{f}.tfrecords", records(f), compression)
    return str(d)


def cli(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    with pytest.raises(SystemExit) as done:
        main(list(args))
    captured = capsys.readouterr()
    return done.value.code, captured.out.splitlines(), captured.err.splitlines()


def sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_scan_finds_every_frame_and_the_format_round_trips(tmp_path):
    d = dataset(tmp_path)
    for f in range(len(SIZES)):
        path = os.path.join(d, f"part-{f}.tfrecords")
        found = record_index.scan_offsets(path)
        expected = frame_offsets(records(f))
        assert found.offsets.tolist() == expected[:-1]
        assert found.data_size == expected[-1] == os.path.getsize(path)
        assert found.lengths.tolist() == [len(r) for r in records(f)]
        blob = record_index.encode(found)
        assert len(blob) == 24 + 8 * SIZES[f]
        assert blob[:8] == b"BLRIDX\x00\x01"
        assert int.from_bytes(blob[8:16], "little") == SIZES[f]
        assert int.from_bytes(blob[16:24], "little") == expected[-1]
        back = record_index.decode(blob)
        assert back.offsets.tolist() == expected[:-1] and back.data_size == expected[-1]


def test_the_tf_reader_gives_the_same_offsets(tmp_path):
    import tensorflow as tf

    d = dataset(tmp_path)
    path = os.path.join(d, "part-2.tfrecords")
    index_file = path + ".index"
    with open(index_file, "wb") as f:
        f.write(record_index.encode(record_index.scan_offsets(path)))
    assert record_index.tf_offsets(index_file).numpy().tolist() == frame_offsets(records(2))[:-1]
    # Inside a pipeline, from a dataset of index file names (no Python runs there).
    names = tf.data.Dataset.from_tensor_slices([index_file]).map(record_index.tf_offsets)
    assert [o.tolist() for o in names.as_numpy_iterator()] == [frame_offsets(records(2))[:-1]]
    with open(index_file, "r+b") as f:
        f.write(b"NOTANIDX")
    with pytest.raises(tf.errors.InvalidArgumentError, match="not a record index"):
        record_index.tf_offsets(index_file)


def test_decode_refuses_what_is_not_an_index():
    with pytest.raises(ValueError, match="not a record index"):
        record_index.decode(b"x" * 24)
    with pytest.raises(ValueError, match="format version 2"):
        record_index.decode(b"BLRIDX\x00\x02" + bytes(16))
    with pytest.raises(ValueError, match="header says 2 records, which takes 40 bytes, but it is 32 bytes"):
        record_index.decode(b"BLRIDX\x00\x01" + (2).to_bytes(8, "little") + bytes(16))


def test_a_cut_file_is_a_frame_error(tmp_path):
    d = dataset(tmp_path)
    path = os.path.join(d, "part-0.tfrecords")
    ends = frame_offsets(records(0))
    with open(path, "r+b") as f:
        f.truncate(ends[2] + 5)
    with pytest.raises(record_index.FrameError, match=f"record 2 at byte {ends[2]}: the file ends inside its header"):
        record_index.scan_offsets(path)


def test_index_command_writes_every_index_and_the_manifest_entries(tmp_path, monkeypatch, capsys):
    d = dataset(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "index", "d")
    assert code == 0, err
    sizes = [24 + 8 * n for n in SIZES]
    assert out == [f"indexed d/part-{f}.tfrecords: {n} record{'s' * (n != 1)}, index {sizes[f]} bytes"
                   for f, n in enumerate(SIZES)] + [f"wrote 3 indexes ({sum(sizes)} bytes, 8 per record) and "
                                                    "d/__manifest__.json, with entries for 3 files it did not list"]
    data = json.load(open(os.path.join(d, "__manifest__.json")))
    for f, entry in enumerate(data["files"]):
        path = os.path.join(d, f"part-{f}.tfrecords")
        assert entry == {"name": f"part-{f}.tfrecords", "num_records": SIZES[f],
                         "size_bytes": os.path.getsize(path), "sha256": sha(path),
                         "index": {"name": f"part-{f}.tfrecords.index", "size_bytes": sizes[f],
                                   "sha256": sha(path + ".index")}}
        assert record_index.decode(open(path + ".index", "rb").read()).offsets.tolist() == \
            frame_offsets(records(f))[:-1]
    manifest = load_manifest(os.path.join(d, "__manifest__.json"))
    for f in range(3):
        path = os.path.join(d, f"part-{f}.tfrecords")
        assert record_index.load_index(path, manifest).offsets.tolist() == frame_offsets(records(f))[:-1]
    assert not [n for n in os.listdir(d) if n.startswith(".")]  # no temporary file left
    # Run again: the existing entries are kept and their indexes rewritten; no entry added.
    code, out, _ = cli(capsys, "index", "d")
    assert code == 0 and out[-1] == f"wrote 3 indexes ({sum(sizes)} bytes, 8 per record) and d/__manifest__.json"
    assert json.load(open(os.path.join(d, "__manifest__.json"))) == data


def test_index_command_removes_the_leftovers_of_a_killed_run(tmp_path, monkeypatch, capsys):
    d = dataset(tmp_path)
    leftover = os.path.join(d, ".__index__.abc123.tmp")
    open(leftover, "wb").write(b"half")
    os.utime(leftover, (1, 1))
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, "index", "d")
    assert code == 0
    assert "batchloaders index: removed .__index__.abc123.tmp, the temporary index of a run stopped while writing" in err
    assert not os.path.exists(leftover)


def test_index_command_refuses_compressed_data(tmp_path, monkeypatch, capsys):
    dataset(tmp_path, "gzip")
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "index", "d")
    assert (code, out) == (1, [])
    assert err == ["batchloaders index: error: d/__manifest__.json says compression 'gzip': a compressed file cannot "
                   "be read at a byte offset, so it cannot be indexed; rewrite the data files uncompressed "
                   "(compression null) to index them: `batchloaders reshard SRC DEST --shards N` does, and indexes them"]
    assert not [n for n in os.listdir("d") if n.endswith(".index")]


def test_index_command_refuses_a_file_that_disagrees_with_its_entry(tmp_path, monkeypatch, capsys):
    d = dataset(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli(capsys, "index", "d")[0] == 0
    write_records(os.path.join(d, "part-2.tfrecords"), records(2)[:4])
    size = frame_offsets(records(2)[:4])[-1]
    code, out, err = cli(capsys, "index", "d")
    assert (code, out) == (1, [])
    assert err == [f"batchloaders index: error: d/part-2.tfrecords: it holds 4 records in {size} bytes, but the "
                   f"manifest lists 5 records in {frame_offsets(records(2))[-1]} bytes: the file changed after the "
                   "manifest was written (run `batchloaders manifest`)",
                   "batchloaders index: error: no index written: 1 problem in the data files (see `batchloaders "
                   "verify`)"]


def _append(d):
    with open(os.path.join(d, "part-2.tfrecords"), "ab") as f:
        f.write(b"extra")


def _truncate(d):
    with open(os.path.join(d, "part-2.tfrecords"), "r+b") as f:
        f.truncate(frame_offsets(records(2))[4])


def _edit_index(d):
    with open(os.path.join(d, "part-2.tfrecords.index"), "r+b") as f:
        f.seek(24 + 8)
        f.write((7).to_bytes(8, "little"))


def _delete_index(d):
    os.remove(os.path.join(d, "part-2.tfrecords.index"))


def _change_count(d):
    path = os.path.join(d, "__manifest__.json")
    data = json.load(open(path))
    data["files"][2]["num_records"] = 4
    json.dump(data, open(path, "w"))


STALE = {
    "data file appended": (_append, lambda d: f"the data file is {frame_offsets(records(2))[-1] + 5} bytes, but the "
                           f"index was written for a data file of {frame_offsets(records(2))[-1]} bytes: the data "
                           "file changed after the index was written"),
    "data file truncated": (_truncate, lambda d: f"the data file is {frame_offsets(records(2))[4]} bytes, but the "
                            f"index was written for a data file of {frame_offsets(records(2))[-1]} bytes: the data "
                            "file changed after the index was written"),
    "index edited": (_edit_index, lambda d: f"the index file's SHA-256 is {sha(d + '/part-2.tfrecords.index')[:12]}..., "
                     f"but the manifest records {INDEXED[0][:12]}...: it changed after the manifest was written"),
    "index deleted": (_delete_index, lambda d: "the index file is missing"),
    "count changed": (_change_count, lambda d: "the index holds 5 records, but the manifest lists 4 records for "
                                               "the data file"),
}
INDEXED = []  # the SHA-256 of part-2's good index, for the messages


@pytest.mark.parametrize("case", sorted(STALE))
def test_a_stale_index_is_a_manifest_error_and_a_verify_line(tmp_path, monkeypatch, capsys, case):
    d = dataset(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli(capsys, "index", "d")[0] == 0
    INDEXED[:] = [sha(os.path.join(d, "part-2.tfrecords.index"))]
    change, what = STALE[case]
    change(d)
    manifest = load_manifest(os.path.join(d, "__manifest__.json"))
    data_file = os.path.join(d, "part-2.tfrecords")
    with pytest.raises(ManifestError) as caught:
        record_index.load_index(data_file, manifest)
    [problem] = caught.value.problems
    assert problem.file == manifest.path and problem.path == "$.files"
    assert problem.message == (f"data file {data_file}, index {data_file}.index: {what(d)}: write the index again "
                               f"with `batchloaders index {d}`")
    code, out, _ = cli(capsys, "verify", "d")
    assert code == 1
    assert f"d/part-2.tfrecords: its index d/part-2.tfrecords.index: {what(d)} (write it again with `batchloaders " \
           "index`)" in out
    assert out[:2] == ["OK d/part-0.tfrecords (3 records)", "OK d/part-1.tfrecords (0 records)"]


def test_verify_finds_offsets_that_differ_from_the_frames(tmp_path, monkeypatch, capsys):
    """An index whose checksum is recorded but whose offsets are wrong (written by another tool)."""
    d = dataset(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli(capsys, "index", "d")[0] == 0
    path = os.path.join(d, "part-2.tfrecords")
    wrong = record_index.scan_offsets(path)
    offsets = wrong.offsets.copy()
    offsets[3] += 1
    blob = record_index.encode(record_index.RecordIndex(offsets, wrong.data_size))
    open(path + ".index", "wb").write(blob)
    manifest_path = os.path.join(d, "__manifest__.json")
    data = json.load(open(manifest_path))
    data["files"][2]["index"]["sha256"] = hashlib.sha256(blob).hexdigest()
    json.dump(data, open(manifest_path, "w"))
    code, out, _ = cli(capsys, "verify", "d")
    at = frame_offsets(records(2))[3]
    assert code == 1
    assert out == ["OK d/part-0.tfrecords (3 records)", "OK d/part-1.tfrecords (0 records)",
                   f"d/part-2.tfrecords: its index d/part-2.tfrecords.index: record 3 begins at byte {at + 1} in the "
                   f"index, but at byte {at} in the file (write it again with `batchloaders index`)",
                   "1 of 3 files have problems"]


def test_verify_says_ok_for_good_indexes(tmp_path, monkeypatch, capsys):
    dataset(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli(capsys, "index", "d")[0] == 0
    code, out, _ = cli(capsys, "verify", "d")
    assert (code, out[-1]) == (0, "0 of 3 files have problems")


def test_index_files_are_never_data_files(tmp_path, monkeypatch, capsys):
    """A user pattern that matches everything still leaves the indexes (and their temporary files) out."""
    from batchloaders import load_config

    d = dataset(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli(capsys, "index", "d")[0] == 0
    open(os.path.join(d, ".__index__.abc123.tmp"), "wb").write(b"x")
    config = load_config(loader_config(d, [("id", "id")], inputs=["id"],
                                       dataset={"type": "dir", "args": {"data_dir": d, "pattern": "*.tfrecords*"}}))
    assert [os.path.basename(p) for p in config.dataset.files] == [f"part-{f}.tfrecords" for f in range(3)]


def test_the_manifest_refuses_an_index_named_elsewhere(tmp_path, monkeypatch, capsys):
    d = dataset(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli(capsys, "index", "d")[0] == 0
    path = os.path.join(d, "__manifest__.json")
    data = json.load(open(path))
    data["files"][0]["index"]["name"] = "other.index"
    json.dump(data, open(path, "w"))
    with pytest.raises(ManifestError, match=r"\$\.files\[0\]\.index\.name: found 'other.index': expected "
                                            r"'part-0.tfrecords.index'"):
        load_manifest(path)


def test_index_command_on_a_config(tmp_path, monkeypatch, capsys):
    d = dataset(tmp_path)
    config = tmp_path / "c.json"
    config.write_text(json.dumps(loader_config(d, [("id", "id")], inputs=["id"])))
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "index", "c.json")
    assert code == 0, err
    assert out[-1].startswith("wrote 3 indexes")
    assert np.array_equal(record_index.tf_offsets(os.path.join(d, "part-0.tfrecords.index")).numpy(),
                          frame_offsets(records(0))[:-1])


def test_the_manifest_command_keeps_the_index_of_an_unchanged_file(tmp_path, monkeypatch, capsys):
    d = dataset(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli(capsys, "index", "d")[0] == 0
    indexed = json.load(open(os.path.join(d, "__manifest__.json")))["files"]
    write_records(os.path.join(d, "part-2.tfrecords"), records(2)[:4])
    assert cli(capsys, "manifest", "d")[0] == 0
    files = json.load(open(os.path.join(d, "__manifest__.json")))["files"]
    assert files[:2] == indexed[:2]  # unchanged: their indexes kept
    assert "index" not in files[2] and files[2]["num_records"] == 4  # changed: its index dropped with its entry


def test_a_dir_means_the_files_its_manifest_lists(tmp_path, monkeypatch, capsys):
    """A manifest written with --pattern lists files the default pattern does not find."""
    d = tmp_path / "d"
    write_manifest(d, FEATURES)
    for f in range(2):
        write_records(d / f"train-{f}.rec", records(f))
    monkeypatch.chdir(tmp_path)
    assert cli(capsys, "manifest", "d", "--pattern", "train-*")[0] == 0
    code, out, _ = cli(capsys, "index", "d")
    assert code == 0
    assert out[:2] == ["indexed d/train-0.rec: 3 records, index 48 bytes", "indexed d/train-1.rec: 0 records, index 24 bytes"]
    assert [e["index"]["name"] for e in json.load(open(d / "__manifest__.json"))["files"]] == \
        ["train-0.rec.index", "train-1.rec.index"]
