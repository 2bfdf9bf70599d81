"""``batchloaders manifest`` on data a new user brings: extensionless shard names (--pattern), raw image
bytes (the hint, --raw), scalars inferred as shape [], and the "guessed:" lines. Exact lines and JSON.

Image r of file f is 28x28 uint8 bytes whose byte k is (10 * f + r + k) % 256, and its label is r, so
every value says where it came from. Commands run in-process from tmp_path: printed paths are relative.
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

import batchloaders
from batchloaders.cli.main import main
from batchloaders.config.datasets import DEFAULT_PATTERN
from conftest import example, sequence_example, write_records

NAMES = [f"train-0000{f}-of-00003" for f in range(3)]
CANDIDATES_784 = ("uint8, int8 or bool [784] or [28, 28]; int16, uint16, float16 or bfloat16 [392]; int32 or "
                  "float32 [196] or [14, 14]; int64 or float64 [98]")
IMAGE_HINT = (f"image: every value is 784 bytes: probably a raw tensor ({CANDIDATES_784}); declare it with "
              "--raw 'image=uint8[28,28]'")
LABEL = {"name": "label", "dtype": "int64", "shape": [], "var_len": False, "deserialize_type": "int"}
RAW_IMAGE = {"name": "image", "dtype": "uint8", "shape": [28, 28], "var_len": False, "deserialize_type": "raw",
             "deserialize_args": {"endian": "little"}}


def cli(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    """Exit status, stdout lines and stderr lines of one command (progress lines left out)."""
    with pytest.raises(SystemExit) as done:
        main(list(args))
    captured = capsys.readouterr()
    err = [line for line in captured.err.splitlines() if not line.startswith("manifest: ")]
    return done.value.code, captured.out.splitlines(), err


def image(f: int, r: int) -> bytes:
    return bytes((10 * f + r + k) % 256 for k in range(784))


def mnist_like(tmp_path, monkeypatch, records: int = 4) -> list[dict]:
    """noext/ with three extensionless shards (and a file no pattern here matches); their files entries."""
    monkeypatch.chdir(tmp_path)
    for f, name in enumerate(NAMES):
        write_records(tmp_path / "noext" / name, [example(image=("string", [image(f, r)]), label=("int", [r]))
                                                  for r in range(records)])
    (tmp_path / "noext" / "README.txt").write_text("not data\n")
    return [entry(tmp_path / "noext", name, records) for name in NAMES]


def entry(directory, name: str, records: int) -> dict:
    data = (directory / name).read_bytes()
    return {"name": name, "num_records": records, "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def wrote(entries: list[dict], directory: str = "noext") -> str:
    return (f"wrote {directory}/__manifest__.json: {len(entries)} files, {sum(e['num_records'] for e in entries)} "
            f"records, {sum(e['size_bytes'] for e in entries):,} bytes")


def manifest(tmp_path, directory: str = "noext") -> dict:
    return json.loads((tmp_path / directory / "__manifest__.json").read_text())


def test_without_a_pattern_the_error_names_what_was_looked_for(tmp_path, monkeypatch, capsys):
    mnist_like(tmp_path, monkeypatch)
    for f, name in enumerate(NAMES):  # shards of one digit each side: not what the default takes
        os.rename(tmp_path / "noext" / name, tmp_path / "noext" / f"train-{f}-of-3")
    there = ("found 4 other files: 'README.txt', 'train-0-of-3', 'train-1-of-3', 'train-2-of-3'; --pattern "
             "'train-*-of-*' matches 3 of them")
    assert cli(capsys, "manifest", "noext") == (1, [], [
        f"batchloaders manifest: error: no data file under noext (files matching {DEFAULT_PATTERN}): {there}"])
    assert cli(capsys, "manifest", "noext", "--pattern", "val-*") == (1, [], [
        f"batchloaders manifest: error: no data file under noext (files matching val-*): {there}"])
    assert not (tmp_path / "noext" / "__manifest__.json").exists()


def test_raw_image_bytes_get_a_hint_and_every_guess_is_listed(tmp_path, monkeypatch, capsys):
    entries = mnist_like(tmp_path, monkeypatch)
    assert cli(capsys, "manifest", "noext", "--pattern", "train-*") == (0, [
        "features inferred from 12 records of 3 files (tf.train.Example, compression null): image (string []), "
        "label (int64 [])",
        wrote(entries),
        IMAGE_HINT,
        "guessed: compression null (told from the files' bytes)",
        "guessed: allow_var_len false (tf.train.Example records: none of the 12 records looked at holds feature "
        "lists)",
        "guessed: image: string [] (a bytes_list of 1 value in every record looked at)",
        "guessed: label: int64 [] (an int64_list of 1 value in every record looked at)"], [])
    assert manifest(tmp_path) == {"compression": None, "allow_var_len": False, "features": [
        {"name": "image", "dtype": "string", "shape": [], "var_len": False, "deserialize_type": "string"}, LABEL],
        "files": entries}


def first_batch(tmp_path, **args) -> tuple[dict, dict]:
    config = {"type": "independent", "model": {"inputs": ["image"], "targets": ["label"]}, "args": {
        "dataset": {"type": "dir", "args": {"data_dir": str(tmp_path / "noext"), "pattern": "train-*"}},
        "target_batch_size": 4, "drop_remainder": False, "epochs": 1, "num_read_buffer_bytes": 0, "num_prefetch": 0,
        "primary_features": [{"from_name": "image", "to_name": "image"}, {"from_name": "label", "to_name": "label"}],
        **args}}
    return next(iter(batchloaders.build_input_fn(config)().as_numpy_iterator()))


@pytest.mark.parametrize("rerun", [False, True], ids=["first run", "rerun on the manifest written before"])
def test_raw_declares_the_image_and_the_batches_hold_its_bytes(tmp_path, monkeypatch, capsys, rerun):
    entries = mnist_like(tmp_path, monkeypatch)
    if rerun:
        assert cli(capsys, "manifest", "noext", "--pattern", "train-*")[0] == 0
    status, out, err = cli(capsys, "manifest", "noext", "--pattern", "train-*", "--raw", "image=uint8[28,28]")
    assert (status, err) == (0, [])
    if rerun:  # nothing guessed: the manifest gives compression, allow_var_len and label
        assert out == ["features kept from the existing manifest: image (raw uint8 [28, 28]) from --raw, label",
                       wrote(entries)]
    else:
        assert out == [
            "features inferred from 12 records of 3 files (tf.train.Example, compression null): image (raw uint8 "
            "[28, 28]), label (int64 [])",
            wrote(entries),
            "guessed: compression null (told from the files' bytes)",
            "guessed: allow_var_len false (tf.train.Example records: none of the 12 records looked at holds "
            "feature lists)",
            "guessed: label: int64 [] (an int64_list of 1 value in every record looked at)"]
    assert manifest(tmp_path) == {"compression": None, "allow_var_len": False, "features": [RAW_IMAGE, LABEL],
                                  "files": entries}
    features, targets = first_batch(tmp_path)
    assert features["image"].dtype == np.uint8 and features["image"].shape == (4, 28, 28)
    assert [features["image"][r].tobytes() for r in range(4)] == [image(0, r) for r in range(4)]
    assert targets["label"].tolist() == [0, 1, 2, 3]  # scalars: [B], not [B, 1]


def test_the_pattern_lists_exactly_the_files_it_matches(tmp_path, monkeypatch, capsys):
    entries = mnist_like(tmp_path, monkeypatch)
    (tmp_path / "noext" / "sub").mkdir()
    write_records(tmp_path / "noext" / "sub" / "train-00009-of-00010", [example(image=("string", [image(9, 0)]),
                                                                                label=("int", [0]))])
    assert cli(capsys, "manifest", "noext", "--pattern", "train-0000[01]-*")[0] == 0
    assert [e["name"] for e in manifest(tmp_path)["files"]] == NAMES[:2]
    # '**' matches every file but the manifest (README.txt would be refused as not TFRecord), in walk order.
    (tmp_path / "noext" / "README.txt").unlink()
    assert cli(capsys, "manifest", "noext", "--pattern", "**")[0] == 0
    assert manifest(tmp_path)["files"] == [entry(tmp_path / "noext", "sub/train-00009-of-00010", 1)] + entries


def test_scalars_are_shape_empty_in_records_and_in_feature_list_steps(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_records(tmp_path / "d" / "part-0.tfrecords", [sequence_example(
        {"id": ("int", [r]), "w": ("float", [r + 0.5]), "tag": ("string", [b"t%d" % r]), "xy": ("float", [r, r])},
        {"frames": ("float", [[s] for s in range(r + 1)])}) for r in range(3)])
    assert cli(capsys, "manifest", "d")[0] == 0
    assert manifest(tmp_path, "d")["features"] == [
        {"name": "frames", "dtype": "float32", "shape": [], "var_len": True, "deserialize_type": "float"},
        {"name": "id", "dtype": "int64", "shape": [], "var_len": False, "deserialize_type": "int"},
        {"name": "tag", "dtype": "string", "shape": [], "var_len": False, "deserialize_type": "string"},
        {"name": "w", "dtype": "float32", "shape": [], "var_len": False, "deserialize_type": "float"},
        {"name": "xy", "dtype": "float32", "shape": [2], "var_len": False, "deserialize_type": "float"}]


def test_a_manifest_written_before_keeps_its_declared_shapes(tmp_path, monkeypatch, capsys):
    entries = mnist_like(tmp_path, monkeypatch)
    old = [{"name": "image", "dtype": "string", "shape": [1], "var_len": False, "deserialize_type": "string"},
           {**LABEL, "shape": [1]}]
    (tmp_path / "noext" / "__manifest__.json").write_text(json.dumps({"compression": None, "allow_var_len": False,
                                                                      "features": old}))
    assert cli(capsys, "manifest", "noext", "--pattern", "train-*") == (0, [
        "features kept from the existing manifest: image, label", wrote(entries)], [])
    assert manifest(tmp_path) == {"compression": None, "allow_var_len": False, "features": old, "files": entries}


def test_values_of_varying_length_or_of_text_get_no_hint(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_records(tmp_path / "d" / "part-0.tfrecords", [example(
        blob=("string", [bytes(range(r + 1))]), code=("string", [b"ab%d" % r]), raw2=("string", [b"\0\1", b"\2\3"]))
        for r in range(3)])
    status, out, err = cli(capsys, "manifest", "d")
    assert (status, err) == (0, [])
    assert out[0] == ("features inferred from 3 records of 1 file (tf.train.Example, compression null): blob "
                      "(string []), code (string []), raw2 (string [2])")
    assert out[2:] == [
        "raw2: every value is 2 bytes: probably a raw tensor (uint8, int8 or bool [2]; int16, uint16, float16 or "
        "bfloat16 [1]); declare it with --raw 'raw2=uint8[2]'",
        "guessed: compression null (told from the files' bytes)",
        "guessed: allow_var_len false (tf.train.Example records: none of the 3 records looked at holds feature "
        "lists)",
        "guessed: blob: string [] (a bytes_list of 1 value in every record looked at)",
        "guessed: code: string [] (a bytes_list of 1 value in every record looked at)",
        "guessed: raw2: string [2] (a bytes_list of 2 values in every record looked at)"]
    # Two byte strings a record: raw stacks them (len 2); a dtype of 2 bytes is little-endian unless said.
    os.remove(tmp_path / "d" / "__manifest__.json")
    status, out, err = cli(capsys, "manifest", "d", "--raw", "raw2=int16[]")
    assert (status, out[-1], err) == (0, "guessed: raw2: little-endian int16 (deserialize_args.endian: say \"big\" "
                                         "if the bytes were written big-endian)", [])
    assert manifest(tmp_path, "d")["features"][2] == {
        "name": "raw2", "dtype": "int16", "shape": [], "var_len": False, "deserialize_type": "raw",
        "deserialize_args": {"endian": "little", "len": 2}}


RAW_ERRORS = {
    # --raw (or --pattern) arguments: the error line after "batchloaders manifest: error: "
    "unknown dtype": (["--raw", "image=uint9[28,28]"], "--raw 'image=uint9[28,28]': found dtype 'uint9': expected a "
                      "dtype raw bytes decode to (uint8, int8, bool, int16, uint16, float16, bfloat16, int32, "
                      "float32, int64 or float64)"),
    "uint32": (["--raw", "image=uint32"], "--raw 'image=uint32': found dtype 'uint32': expected a dtype raw bytes "
               "decode to (uint8, int8, bool, int16, uint16, float16, bfloat16, int32, float32, int64 or float64)"),
    "no dtype": (["--raw", "image"], "--raw 'image': expected NAME=DTYPE[SHAPE], such as image=uint8[28,28]"),
    "bad shape": (["--raw", "image=uint8[28,0]"], "--raw 'image=uint8[28,0]': found the shape [28,0]: expected axis "
                  "sizes of at least 1 between commas, such as [28,28] ([] for a single value)"),
    "twice": (["--raw", "image=uint8", "--raw", "image=int8"], "--raw 'image=int8': feature 'image' is already "
              "declared by --raw 'image=uint8': expected each feature once"),
    "unknown feature": (["--raw", "imgae=uint8[28,28]"], "--raw 'imgae=uint8[28,28]': no feature 'imgae' in the 12 "
                        "records looked at: expected one of image, label"),
    "not bytes": (["--raw", "label=uint8[8]"], "--raw 'label=uint8[8]': feature 'label' is stored in an int64_list: "
                  "expected a bytes_list, where raw tensors are"),
    "size does not divide": (["--raw", "image=float64[3]"], "--raw 'image=float64[3]': float64 [3] is 24 bytes, but "
                             "every value of 'image' is 784 bytes: expected a shape of 98 elements, such as [98]"),
    "shape of another size": (["--raw", "image=uint8[28]"], "--raw 'image=uint8[28]': uint8 [28] is 28 bytes, but "
                              "every value of 'image' is 784 bytes: expected a shape of 784 elements, such as [784] "
                              "or [28, 28]"),
    "bad pattern": (["--pattern", "train-{0"], "--pattern 'train-{0': found '{' without '}': expected "
                    "{alternative,alternative}"),
}


@pytest.mark.parametrize("case", list(RAW_ERRORS))
def test_a_wrong_raw_or_pattern_is_a_usage_error(tmp_path, monkeypatch, capsys, case):
    args, message = RAW_ERRORS[case]
    mnist_like(tmp_path, monkeypatch)
    pattern = [] if "--pattern" in args else ["--pattern", "train-*"]
    assert cli(capsys, "manifest", "noext", *pattern, *args) == (2, [], [f"batchloaders manifest: error: {message}"])
    assert sorted(os.listdir(tmp_path / "noext")) == ["README.txt"] + NAMES  # nothing written


def test_a_raw_size_that_no_item_size_divides(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_records(tmp_path / "d" / "part-0.tfrecords", [example(b=("string", [bytes([r]) * 30])) for r in range(2)])
    assert cli(capsys, "manifest", "d", "--raw", "b=float32") == (2, [], [
        "batchloaders manifest: error: --raw 'b=float32': every value of 'b' is 30 bytes, not a whole number of "
        "float32 values (4 bytes each): expected one of uint8, int8 or bool [30]; int16, uint16, float16 or "
        "bfloat16 [15]"])
    write_records(tmp_path / "d" / "part-1.tfrecords", [example(b=("string", [b"\1" * 31]))])
    assert cli(capsys, "manifest", "d", "--raw", "b=uint8") == (2, [], [
        "batchloaders manifest: error: --raw 'b=uint8': the values of 'b' differ in length (30 bytes in "
        "d/part-0.tfrecords: record 0; 31 bytes in d/part-1.tfrecords: record 0): expected one length, the size "
        "of the raw tensor"])
    assert cli(capsys, "manifest", "d", "--raw", "c=uint8") == (2, [], [
        "batchloaders manifest: error: --raw 'c=uint8': no feature 'c' in the 3 records looked at: expected one of b"])


def test_help_says_which_files_are_found_by_default(capsys):
    with pytest.raises(SystemExit):
        main(["manifest", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "train-00000-of-01024" in text and "*.tfrecords, *.tfrecord or *.tfrec" in text
    assert "[--pattern GLOB] [--raw NAME=DTYPE[SHAPE]]" in text
