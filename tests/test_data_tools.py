"""``check-data``, ``manifest`` and ``verify`` on real TFRecord files: exact lines and exit codes.

Record r of file f holds id = 100 * f + r, x = [id, id + 0.5] and (raw uint8
[2, 3]) six bytes of id % 256, so every record says where it came from.
Commands run in-process through ``batchloaders.cli.main.main`` from tmp_path, so
printed paths are relative (d/part-1.tfrecords); one test runs the real
console entry point in a subprocess.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys

import pytest

from batchloaders.cli.main import main
from batchloaders.cli.progress import Progress
from conftest import (example, feature, flip_byte, frame_offsets, loader_config, sequence_example, write_manifest,
                      write_records)

P0, P1, P2 = "d/part-0.tfrecords", "d/part-1.tfrecords", "d/part-2.tfrecords"
FEATURES = [feature("id", "int64", [], "int"), feature("x", "float32", [2], "float"),
            feature("img", "uint8", [2, 3], "raw", endian="little")]
SEQ_FEATURES = [feature("id", "int64", [], "int", var_len=False),
                feature("frames", "float32", [1], "float", var_len=True)]
FRAMED = "a record's length, payload or checksum is damaged, or the file ends inside a record"


def cli(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    """Exit status, stdout lines and stderr lines of one command (progress lines left out)."""
    with pytest.raises(SystemExit) as done:
        main(list(args))
    captured = capsys.readouterr()
    err = [line for line in captured.err.splitlines() if not line.startswith(("verify: ", "manifest: "))]
    return done.value.code, captured.out.splitlines(), err


def record(f: int, r: int, **change) -> bytes:
    """Record r of file f; ``change`` replaces features (None drops one)."""
    i = 100 * f + r
    features = {"id": ("int", [i]), "x": ("float", [i, i + 0.5]), "img": ("string", [bytes([i % 256] * 6)])}
    features.update(change)
    return example(**{k: v for k, v in features.items() if v is not None})


def seq_record(f: int, r: int) -> bytes:
    """A SequenceExample: context id, and r + 1 steps of frames holding [id + step]."""
    i = 100 * f + r
    return sequence_example({"id": ("int", [i])}, {"frames": ("float", [[i + s] for s in range(r + 1)])})


def good(f: int, n: int = 3) -> list[bytes]:
    return [record(f, r) for r in range(n)]


offsets, flip = frame_offsets, flip_byte
AT = offsets(good(1))  # where the records of part-1 (uncompressed) begin, then its end


def make(tmp_path, monkeypatch, files: dict, *, features=FEATURES, allow_var_len=False, compression=None,
         written: dict | None = None) -> str:
    """Dataset d/ (manifest + files) and config c.json reading its 'id'; cwd is tmp_path. Returns 'c.json'.

    ``files``: name -> records, or bytes written as they are; ``written``: name -> the compression a
    file is written with, when it is not the manifest's.
    """
    monkeypatch.chdir(tmp_path)
    write_manifest(tmp_path / "d", features, allow_var_len=allow_var_len, compression=compression)
    for name, content in files.items():
        path = tmp_path / "d" / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            write_records(path, content, (written or {}).get(name, compression))
    (tmp_path / "c.json").write_text(json.dumps(loader_config(tmp_path / "d", [("id", "id")], inputs=["id"])))
    return "c.json"


# ------------------------------------------------------------------------------------------- check-data

SAYS_X = "feature 'x': the manifest says float (float_list) of shape [2] (2 values)"
SAYS_FRAMES = ("feature 'frames': the manifest says a feature list whose every step holds float (float_list) of "
               "shape [1] (1 value)")
TEXT = b"id,x\n1,2.5\n" * 3

CHECK_CASES = {
    # name: (files of d/ besides part-0, manifest arguments, extra CLI args, lines after part-0's, status)
    "intact, with an empty file": (
        {"part-1.tfrecords": good(1), "part-2.tfrecords": []}, {}, [],
        [f"OK {P1} (3 records checked)", f"OK {P2} (0 records checked)", "0 of 3 files have problems"], 0),
    "a missing feature": (
        {"part-1.tfrecords": [record(1, r, id=None, ids=("int", [r])) for r in range(3)]}, {}, [],
        [f"{P1}: record 0: feature 'id': the manifest says int (int64_list) of shape [] (1 value), found no such "
         "feature (did you mean 'ids'?) (also in 2 more records: 1-2)", "1 of 2 files have problems"], 1),
    "the wrong stored type": (
        {"part-1.tfrecords": [record(1, r, x=("int", [r, r])) for r in range(3)]}, {}, [],
        [f"{P1}: record 0: {SAYS_X}, found an int64_list of 2 values (also in 2 more records: 1-2)",
         "1 of 2 files have problems"], 1),
    "the wrong count": (
        {"part-1.tfrecords": [record(1, 0), record(1, 1, x=("float", [1, 2, 3])), record(1, 2)]}, {}, [],
        [f"{P1}: record 1: {SAYS_X}, found a float_list of 3 values", "1 of 2 files have problems"], 1),
    "the wrong count, after the records checked": (
        {"part-1.tfrecords": [record(1, 0), record(1, 1, x=("float", [1, 2, 3])), record(1, 2)]}, {},
        ["--records", "1"], [f"OK {P1} (1 record checked)", "0 of 2 files have problems"], 0),
    "the wrong raw byte length": (
        {"part-1.tfrecords": [record(1, 0), record(1, 1), record(1, 2, img=("string", [b"12345"]))]}, {}, [],
        [f"{P1}: record 2: feature 'img': the manifest says raw uint8 of shape [2, 3] (a bytes_list of 1 byte "
         "string of 6 bytes), found a bytes_list of 1 byte string of 5 bytes", "1 of 2 files have problems"], 1),
    "SequenceExamples under allow_var_len false": (
        {"part-1.tfrecords": [seq_record(1, r) for r in range(2)]}, {}, [],
        [f"{P1}: record 0: holds feature lists ('frames'), so it is a tf.train.SequenceExample, but the manifest "
         "says allow_var_len false: records must be tf.train.Example (also in record 1)",
         "1 of 2 files have problems"], 1),
    "Examples under allow_var_len true": (
        {"part-1.tfrecords": [example(id=("int", [r]), frames=("float", [r])) for r in range(2)]},
        {"features": SEQ_FEATURES, "allow_var_len": True}, [],
        [f"{P1}: record 0: holds no feature lists, so it is a tf.train.Example (or a SequenceExample without its "
         "feature lists), but the manifest says allow_var_len true with feature lists 'frames': records must be "
         "tf.train.SequenceExample (also in record 1)", "1 of 2 files have problems"], 1),
    "a feature list stored as a context feature, and a step of the wrong size": (
        {"part-1.tfrecords": [
            sequence_example({"id": ("int", [100]), "frames": ("float", [1.0])}, {"other": ("int", [[1]])}),
            sequence_example({"id": ("int", [101])}, {"frames": ("float", [[1.0], [2.0, 3.0], [4.0]])})]},
        {"features": SEQ_FEATURES, "allow_var_len": True}, [],
        [f"{P1}: record 0: {SAYS_FRAMES}, found a context feature (a float_list of 1 value)",
         f"{P1}: record 1: {SAYS_FRAMES}, found at step 1 a float_list of 2 values", "1 of 2 files have problems"], 1),
    "a GZIP file under compression null": (
        {"part-1.tfrecords": good(1)}, {"written": {"part-1.tfrecords": "gzip"}}, [],
        [f"{P1}: the file is GZIP-compressed, but the manifest says compression null", "1 of 2 files have problems"],
        1),
    "an uncompressed file under compression gzip": (
        {"part-1.tfrecords": good(1)}, {"compression": "gzip", "written": {"part-1.tfrecords": None}}, [],
        [f"{P1}: the file is not compressed, but the manifest says compression 'gzip'", "1 of 2 files have problems"],
        1),
    "a file that is not TFRecord": (
        {"part-1.tfrecords": TEXT}, {}, [],
        [f"{P1}: not a TFRecord file: its first bytes, 69 64 2c 78 0a 31 2c 32 (b'id,x\\n1,2'), are neither a "
         "TFRecord record header (with its checksum) nor the start of a GZIP or ZLIB stream (or the first record's "
         "header is damaged)",
         "1 of 2 files have problems"], 1),
    "a damaged payload": (  # flipped by the test
        {"part-1.tfrecords": good(1)}, {}, [],
        [f"{P1}: record 1 at byte {AT[1]}: cannot be read (corrupted record at {AT[1] + 12}): {FRAMED}",
         "1 of 2 files have problems"], 1),
}


@pytest.mark.parametrize("case", list(CHECK_CASES))
def test_check_data(tmp_path, monkeypatch, capsys, case):
    files, manifest, args, expected, status = CHECK_CASES[case]
    manifest = dict(manifest)
    first = [seq_record(0, r) for r in range(3)] if manifest.get("allow_var_len") else good(0)
    files = {"part-0.tfrecords": first, **files}
    config = make(tmp_path, monkeypatch, files, **manifest)
    if case == "a damaged payload":
        path = tmp_path / "d" / "part-1.tfrecords"
        path.write_bytes(flip(path.read_bytes(), AT[1] + 12 + 3))
    first_line = f"OK {P0} (1 record checked)" if args else f"OK {P0} (3 records checked)"
    assert cli(capsys, "check-data", config, *args) == (status, [first_line] + expected, [])


def test_validate_data_checks_the_data_of_valid_configs(tmp_path, monkeypatch, capsys):
    config = make(tmp_path, monkeypatch, {"part-0.tfrecords": good(0),
                                          "part-1.tfrecords": [record(1, r, x=("int", [r, r])) for r in range(3)]})
    (tmp_path / "bad.json").write_text("{}")
    assert cli(capsys, "validate", "--data", config, "bad.json", "d") == (1, [
        "OK c.json",
        "bad.json: $: missing required key 'args' (line 1, column 1)",
        "bad.json: $: missing required key 'type' (line 1, column 1)",
        "OK d/__manifest__.json",
        "1 of 3 files invalid (2 problems)",
        "data of c.json:",
        f"OK {P0} (3 records checked)",
        f"{P1}: record 0: {SAYS_X}, found an int64_list of 2 values (also in 2 more records: 1-2)",
        "1 of 2 files have problems"], [])
    write_records(tmp_path / "d" / "part-1.tfrecords", good(1))
    assert cli(capsys, "validate", "--data", config) == (0, [
        "OK c.json", "data of c.json:", f"OK {P0} (3 records checked)", f"OK {P1} (3 records checked)",
        "0 of 2 files have problems"], [])


def test_check_data_of_an_invalid_config(tmp_path, monkeypatch, capsys):
    make(tmp_path, monkeypatch, {"part-0.tfrecords": good(0)})
    (tmp_path / "c.json").write_text(json.dumps(loader_config(tmp_path / "d", [("idd", "id")], inputs=["id"])))
    status, out, err = cli(capsys, "check-data", "c.json")
    assert (status, out) == (1, [])
    assert err[0].startswith("batchloaders check-data: error: c.json: $.args.primary_features[0].from_name: ")


# --------------------------------------------------------------------------------------------- manifest


def file_entry(tmp_path, name: str, num_records: int) -> dict:
    data = (tmp_path / "d" / name).read_bytes()
    return {"name": name, "num_records": num_records, "size_bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest()}


def _example_files():
    """Two files and one in a subdirectory; 'tokens' holds r + 1 values, 'name' says 'f<f>r<r>'."""
    def rec(f, r):
        i = 100 * f + r
        return example(id=("int", [i]), x=("float", [i, i + 0.5]), name=("string", [f"f{f}r{r}"]),
                       tokens=("int", list(range(r + 1))))
    return {"part-0.tfrecords": [rec(0, r) for r in range(3)], "part-1.tfrecords": [rec(1, r) for r in range(2)],
            "sub/part-2.tfrecords": [rec(2, 0)]}


EXAMPLE_FEATURES = [
    {"name": "id", "dtype": "int64", "shape": [], "var_len": False, "deserialize_type": "int"},
    {"name": "name", "dtype": "string", "shape": [], "var_len": False, "deserialize_type": "string"},
    {"name": "tokens", "dtype": "int64", "shape": [None], "var_len": False, "deserialize_type": "int"},
    {"name": "x", "dtype": "float32", "shape": [2], "var_len": False, "deserialize_type": "float"}]

EXAMPLE_GUESSES = [
    "guessed: allow_var_len false (tf.train.Example records: none of the 6 records looked at holds feature lists)",
    "guessed: id: int64 [] (an int64_list of 1 value in every record looked at)",
    "guessed: name: string [] (a bytes_list of 1 value in every record looked at)",
    "guessed: tokens: int64 [null] (an int64_list of 1 to 3 values in the records looked at: a variable length)",
    "guessed: x: float32 [2] (a float_list of 2 values in every record looked at)"]

INFER_CASES = {
    # name: (files, compression written, allow_var_len, features, summary and guessed lines, stderr)
    "Examples": (_example_files(), None, False, EXAMPLE_FEATURES, [
        "features inferred from 6 records of 3 files (tf.train.Example, compression null): id (int64 []), "
        "name (string []), tokens (int64 [null]), x (float32 [2])",
        "guessed: compression null (told from the files' bytes)", *EXAMPLE_GUESSES], []),
    "SequenceExamples": (
        {"part-0.tfrecords": [seq_record(0, r) for r in range(3)], "part-1.tfrecords": [seq_record(1, 0)]}, None,
        True, [{"name": "frames", "dtype": "float32", "shape": [], "var_len": True, "deserialize_type": "float"},
               {"name": "id", "dtype": "int64", "shape": [], "var_len": False, "deserialize_type": "int"}], [
            "features inferred from 4 records of 2 files (tf.train.SequenceExample, compression null): "
            "frames (float32 [], feature list), id (int64 [])",
            "guessed: compression null (told from the files' bytes)",
            "guessed: allow_var_len true (tf.train.SequenceExample records: some records looked at hold feature "
            "lists)",
            "guessed: frames: float32 [] per step (a float_list of 1 value in every step looked at)",
            "guessed: id: int64 [] (an int64_list of 1 value in every record looked at)"], []),
    "GZIP Examples": (_example_files(), "gzip", False, EXAMPLE_FEATURES, [
        "features inferred from 6 records of 3 files (tf.train.Example, compression 'gzip'): "
        "id (int64 []), name (string []), tokens (int64 [null]), x (float32 [2])", "guessed: compression 'gzip' "
        "(told from the files' bytes)", *EXAMPLE_GUESSES], []),
}


@pytest.mark.parametrize("case", list(INFER_CASES))
def test_manifest_infers_features(tmp_path, monkeypatch, capsys, case):
    files, compression, allow_var_len, features, (summary, *guessed), err = INFER_CASES[case]
    monkeypatch.chdir(tmp_path)
    for name, records in files.items():
        write_records(tmp_path / "d" / name, records, compression)
    entries = [file_entry(tmp_path, name, len(records)) for name, records in files.items()]
    size = sum(e["size_bytes"] for e in entries)
    total = sum(e["num_records"] for e in entries)
    assert cli(capsys, "manifest", "d") == (0, [
        summary, f"wrote d/__manifest__.json: {len(files)} files, {total} records, {size:,} bytes", *guessed], err)
    text = (tmp_path / "d" / "__manifest__.json").read_text()
    assert json.loads(text) == {"compression": compression, "allow_var_len": allow_var_len, "features": features,
                                "files": entries}
    assert list(json.loads(text)) == ["compression", "allow_var_len", "features", "files"]
    assert '"shape": [],' in text and text.startswith('{\n  "compression": ')


def test_manifest_keeps_what_the_manifest_declares(tmp_path, monkeypatch, capsys):
    make(tmp_path, monkeypatch, {"part-0.tfrecords": good(0), "part-1.tfrecords": good(1, 2)})
    declared = {"compression": None, "allow_var_len": False, "features": FEATURES,
                "files": [{"name": "gone.tfrecords", "num_records": 7}]}
    (tmp_path / "d" / "__manifest__.json").write_text(json.dumps(declared))
    entries = [file_entry(tmp_path, "part-0.tfrecords", 3), file_entry(tmp_path, "part-1.tfrecords", 2)]
    size = entries[0]["size_bytes"] + entries[1]["size_bytes"]
    assert cli(capsys, "manifest", "d") == (0, [
        "features kept from the existing manifest: id, x, img",
        f"wrote d/__manifest__.json: 2 files, 5 records, {size:,} bytes"], [])
    assert json.loads((tmp_path / "d" / "__manifest__.json").read_text()) == {**declared, "files": entries}


REFUSE_CASES = {
    # name: (damage of part-1's bytes, stderr; None: a dataset of nothing to infer)
    "a file cut inside a payload": (lambda d: d[:AT[1] + 12 + 5], [
        f"batchloaders manifest: error: {P1}: record 1 at byte {AT[1]}: cannot be read (the data ends inside "
        f"the record that starts at byte {AT[1]}): {FRAMED}",
        "batchloaders manifest: error: no manifest written: 1 problem in the data files (see `batchloaders verify`)"]),
    "a file cut inside a header": (lambda d: d[:AT[2] + 5], [
        f"batchloaders manifest: error: {P1}: the file is {AT[2] + 5} bytes, but its 2 records end at byte {AT[2]}: "
        "the last 5 bytes are not a whole record (the file was cut inside a record header, or has bytes appended)",
        "batchloaders manifest: error: no manifest written: 1 problem in the data files (see `batchloaders verify`)"]),
    "no feature to infer": (lambda d: b"", None),
}


@pytest.mark.parametrize("case", list(REFUSE_CASES))
def test_manifest_refuses(tmp_path, monkeypatch, capsys, case):
    damage, err = REFUSE_CASES[case]
    monkeypatch.chdir(tmp_path)
    if err is None:  # every record holds one feature, stored in a different list type in each
        write_records(tmp_path / "d" / "part-0.tfrecords",
                      [example(tokens=(kind, [1])) for kind in ("int", "float")])
        err = ["batchloaders manifest: feature 'tokens' left out: stored in different list types: int64_list in "
               f"{P0}: record 0; float_list in {P0}: record 1",
               "batchloaders manifest: error: no feature could be inferred from the 2 records looked at (the first "
               "64 of each file); declare the features in d/__manifest__.json"]
    else:
        write_records(tmp_path / "d" / "part-0.tfrecords", good(0))
    path = write_records(tmp_path / "d" / "part-1.tfrecords", good(1))
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(damage(data))
    assert cli(capsys, "manifest", "d") == (1, [], err)
    assert sorted(os.listdir(tmp_path / "d")) == ["part-0.tfrecords", "part-1.tfrecords"]  # no manifest, no temp


# ----------------------------------------------------------------------------------------------- verify


def _gzip_trailer(data):
    return flip(data, len(data) - 5)  # the last byte of the stored CRC-32, checked at the stream's end


VERIFY_CASES = {
    # name: (compression, damage(bytes) -> bytes | None to delete, part-1 lines (k: facts), status)
    "intact": (None, None, lambda k: [f"OK {P1} (3 records)"], 0),
    "truncated mid-payload": (None, lambda d: d[:AT[1] + 12 + 5], lambda k: [
        f"{P1}: record 1 at byte {AT[1]}: cannot be read (the data ends inside the record that starts "
        f"at byte {AT[1]}): {FRAMED}", k["size"]], 1),
    "truncated inside a header": (None, lambda d: d[:AT[1] + 5], lambda k: [
        f"{P1}: the file is {AT[1] + 5} bytes, but its 1 record ends at byte {AT[1]}: the last 5 bytes are not a whole "
        "record (the file was cut inside a record header, or has bytes appended)", k["size"]], 1),
    "truncated at a record boundary": (None, lambda d: d[:AT[2]], lambda k: [
        f"{P1}: the manifest lists 3 records for this file (line {k['line']}), but it holds 2 (the file was cut at a "
        "record boundary or emptied, or changed after the manifest was written)", k["size"]], 1),
    "flipped byte in a length": (None, lambda d: flip(d, AT[1] + 2), lambda k: [
        f"{P1}: record 1 at byte {AT[1]}: cannot be read (corrupted record at {AT[1]}): {FRAMED}", k["sha"]], 1),
    "flipped byte in a length checksum": (None, lambda d: flip(d, AT[1] + 9), lambda k: [
        f"{P1}: record 1 at byte {AT[1]}: cannot be read (corrupted record at {AT[1]}): {FRAMED}", k["sha"]], 1),
    "flipped byte in a payload": (None, lambda d: flip(d, AT[1] + 12 + 7), lambda k: [
        f"{P1}: record 1 at byte {AT[1]}: cannot be read (corrupted record at {AT[1] + 12}): {FRAMED}", k["sha"]], 1),
    "flipped byte in a payload checksum": (None, lambda d: flip(d, AT[2] - 2), lambda k: [
        f"{P1}: record 1 at byte {AT[1]}: cannot be read (corrupted record at {AT[1] + 12}): {FRAMED}", k["sha"]], 1),
    "garbage appended": (None, lambda d: d + b"garbage!", lambda k: [
        f"{P1}: the file is {AT[3] + 8} bytes, but its 3 records end at byte {AT[3]}: the last 8 bytes are not a "
        "whole record (the file was cut inside a record header, or has bytes appended)", k["size"]], 1),
    "emptied file": (None, lambda d: b"", lambda k: [
        f"{P1}: the manifest lists 3 records for this file (line {k['line']}), but it holds 0 (the file was cut at a "
        "record boundary or emptied, or changed after the manifest was written)", k["size"]], 1),
    "GZIP without its trailer": ("gzip", lambda d: d[:-8], lambda k: [
        f"{P1}: the GZIP stream ends before its end marker and trailer: the file was cut, or was never finished "
        "(TensorFlow's reader stops there without an error)", k["size"]], 1),
    "damaged GZIP": ("gzip", _gzip_trailer, lambda k: [
        f"{P1}: record 0 at byte 0 of the uncompressed stream: cannot be read (inflate() failed with error -3: "
        "incorrect data check): the GZIP stream or a record in it is damaged", k["sha"]], 1),
    "ZLIB without its checksum": ("zlib", lambda d: d[:-4], lambda k: [
        f"{P1}: the ZLIB stream ends before its end marker and trailer: the file was cut, or was never finished "
        "(TensorFlow's reader stops there without an error)", k["size"]], 1),
    "file missing": (None, lambda d: None, lambda k: [
        f"{P1}: missing: the manifest d/__manifest__.json lists it (line {k['line']}) with 3 records"], 1),
    "file not listed": (None, "part-2", lambda k: [
        f"OK {P1} (3 records)", f"{P2}: not listed in the files of the manifest d/__manifest__.json: it was added "
        "after the manifest was written (run `batchloaders manifest` on the dataset directory)"], 1),
    "a record of the wrong type": (None, "wrong type", lambda k: [
        f"{P1}: record 2: {SAYS_X}, found an int64_list of 2 values"], 1),
}


def _written(tmp_path, monkeypatch, capsys, case: str, compression=None) -> None:
    """d/ with part-0 and part-1 (3 records each) and the manifest `batchloaders manifest d` writes for it."""
    part1 = [record(1, 0), record(1, 1), record(1, 2, x=("int", [1, 2]))] if case == "a record of the wrong type" \
        else good(1)
    make(tmp_path, monkeypatch, {"part-0.tfrecords": good(0), "part-1.tfrecords": part1}, compression=compression)
    status, _, err = cli(capsys, "manifest", "d")
    assert (status, err) == (0, [])


@pytest.mark.parametrize("case", list(VERIFY_CASES))
def test_verify(tmp_path, monkeypatch, capsys, case):
    compression, damage, part1, status = VERIFY_CASES[case]
    _written(tmp_path, monkeypatch, capsys, case, compression)
    path = tmp_path / "d" / "part-1.tfrecords"
    text = (tmp_path / "d" / "__manifest__.json").read_text()
    before = path.read_bytes()
    if damage == "part-2":
        write_records(tmp_path / "d" / "part-2.tfrecords", good(2))
    elif callable(damage):
        after = damage(before)
        if after is None:
            path.unlink()
        else:
            path.write_bytes(after)
    line = text.splitlines().index('      "name": "part-1.tfrecords",')  # 0-based: the 1-based line of its '{'
    size = path.stat().st_size if path.exists() else 0
    facts = {"line": line,
             "size": f"{P1}: the file is {size:,} bytes, but the manifest records {len(before):,} bytes (line {line})"}
    if path.exists():
        now, then = hashlib.sha256(path.read_bytes()).hexdigest(), hashlib.sha256(before).hexdigest()
        facts["sha"] = (f"{P1}: its SHA-256 is {now[:12]}..., but the manifest records {then[:12]}... (line {line}): "
                        "its bytes changed after the manifest was written")
    lines = part1(facts)
    files = 3 if damage == "part-2" else 2
    summary = f"{status and 1} of {files} files have problems"
    assert cli(capsys, "verify", "d") == (status, [f"OK {P0} (3 records)"] + lines + [summary], [])


def test_verify_a_config_whose_file_was_cut(tmp_path, monkeypatch, capsys):
    """The config is checked against the manifest's sizes when loaded: verify still reads its data and says why."""
    _written(tmp_path, monkeypatch, capsys, "intact")
    assert cli(capsys, "verify", "c.json") == (0, [f"OK {P0} (3 records)", f"OK {P1} (3 records)",
                                                   "0 of 2 files have problems"], [])
    path = tmp_path / "d" / "part-1.tfrecords"
    path.write_bytes(path.read_bytes()[:AT[2]])
    status, out, _ = cli(capsys, "verify", "c.json")
    assert (status, out[0], out[-1]) == (1, f"OK {P0} (3 records)", "1 of 2 files have problems")
    assert out[1].startswith(f"{P1}: the manifest lists 3 records for this file (line ")
    assert out[2].startswith(f"{P1}: the file is {AT[2]} bytes, but the manifest records {AT[3]} bytes (line ")


def test_verify_and_manifest_refuse_what_is_not_a_dataset(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    assert cli(capsys, "verify", "empty") == (1, [], ["batchloaders verify: error: empty/__manifest__.json: $: "
                                                      "file not found"])
    assert cli(capsys, "manifest", "empty") == (1, [], ["batchloaders manifest: error: no data file under empty "
                                                        "(files matching **/*{.tfrecords,.tfrecord,.tfrec,"
                                                        "-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]}"
                                                        "{,.gz,.zz})"])


SECRET = b"root:*:20000:0:99999:7:::\n"  # what /etc/shadow begins with: a file no tool may quote
NEITHER = ("are neither a TFRecord record header (with its checksum) nor the start of a GZIP or ZLIB stream (or the "
           "first record's header is damaged)")


def _list_dataset_with_files_elsewhere(tmp_path, monkeypatch) -> str:
    """d/ (manifest, part-0, notes.tfrecords of TEXT) and a list naming part-0, notes and two files of secrets/
    outside d/: SECRET as it is and gzipped. Returns the config's name; cwd is tmp_path."""
    import gzip

    make(tmp_path, monkeypatch, {"part-0.tfrecords": good(0), "notes.tfrecords": TEXT})
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "shadow.tfrecords").write_bytes(SECRET)
    (tmp_path / "secrets" / "shadow.tfrecords.gz").write_bytes(gzip.compress(SECRET * 2))
    (tmp_path / "files.txt").write_text("d/part-0.tfrecords\nd/notes.tfrecords\nsecrets/shadow.tfrecords\n"
                                        "secrets/shadow.tfrecords.gz\n")
    config = loader_config("unused", [("id", "id")], inputs=["id"])
    config["args"]["dataset"] = {"type": "list", "args": {"manifest_file": "d/__manifest__.json",
                                                          "list_file": "files.txt"}}
    (tmp_path / "list.json").write_text(json.dumps(config))
    return "list.json"


@pytest.mark.parametrize("command,ok", [("check-data", f"OK {P0} (3 records checked)"),
                                        ("verify", f"OK {P0} (3 records)")])
def test_data_tools_quote_no_bytes_of_files_outside_the_dataset_directory(tmp_path, monkeypatch, capsys,
                                                                          command, ok):
    config = _list_dataset_with_files_elsewhere(tmp_path, monkeypatch)
    assert cli(capsys, command, config) == (1, [
        ok,
        f"d/notes.tfrecords: not a TFRecord file: its first bytes, 69 64 2c 78 0a 31 2c 32 (b'id,x\\n1,2'), {NEITHER}",
        f"secrets/shadow.tfrecords: not a TFRecord file: its first bytes {NEITHER}",
        "secrets/shadow.tfrecords.gz: not a TFRecord file: it is a GZIP stream whose content is not TFRecord",
        "3 of 4 files have problems"], [])


def test_manifest_removes_the_temporary_files_of_a_killed_run_and_nothing_else(tmp_path, monkeypatch, capsys):
    """Left in d/ before the run: a temporary manifest of a killed run (an hour old, unlocked), one a live writer
    holds locked, one written after this run began, our pattern in a subdirectory, and other names."""
    import fcntl
    import time

    make(tmp_path, monkeypatch, {"part-0.tfrecords": good(0)})
    d = tmp_path / "d"
    (d / "sub").mkdir()
    hour_ago, later = time.time() - 3600, time.time() + 3600
    files = {".__manifest__.killed1.tmp": hour_ago, ".__manifest__.writing.tmp": hour_ago,
             ".__manifest__.newer.tmp": later, "sub/.__manifest__.deeper.tmp": hour_ago,
             ".__manifest__.tmp": hour_ago, "__manifest__.json.tmp": hour_ago, "notes.tmp": hour_ago}
    for name, mtime in files.items():
        (d / name).write_text("{")
        os.utime(d / name, (mtime, mtime))
    with open(d / ".__manifest__.writing.tmp", "rb") as writing:
        fcntl.flock(writing, fcntl.LOCK_EX)  # as a run writing its manifest holds it
        status, out, err = cli(capsys, "manifest", "d")
    assert (status, err) == (0, ["batchloaders manifest: removed .__manifest__.killed1.tmp, the temporary manifest "
                                 "of a run stopped while writing"])
    size = (d / "part-0.tfrecords").stat().st_size
    assert out[-1] == f"wrote d/__manifest__.json: 1 file, 3 records, {size:,} bytes"
    left = sorted(str(p.relative_to(d)) for p in d.rglob("*tmp"))
    assert left == sorted(name for name in files if name != ".__manifest__.killed1.tmp")


def test_progress_is_quiet_off_a_terminal_and_redrawn_on_one():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    log = io.StringIO()
    progress = Progress("verify", 2, log)
    progress.advance(records=3, nbytes=2_000_000)
    progress.file_done()
    assert log.getvalue() == ""  # less than 2 s since the start
    progress.last -= 2
    progress.file_done()
    assert log.getvalue() == "verify: 2/2 files, 3 records, 2.0 MB\n"

    screen = Terminal()
    progress = Progress("manifest", 40, screen)
    progress.last -= 1
    progress.advance(records=12_345, nbytes=45_200_000)
    out = io.StringIO()
    progress.print("OK d/part-0.tfrecords (3 records)", out)
    progress.close()
    assert screen.getvalue() == ("\rmanifest: 0/40 files, 12,345 records, 45.2 MB" + "\r" + " " * 45 + "\r")
    assert out.getvalue() == "OK d/part-0.tfrecords (3 records)\n"


def test_console_script_verify(tmp_path, monkeypatch, capsys):
    """The real entry point once: stdout holds only the results, the exit status says there was a problem."""
    _written(tmp_path, monkeypatch, capsys, "intact")
    (tmp_path / "d" / "part-0.tfrecords").write_bytes(b"")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-m", "batchloaders", "verify", "d"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[2:] == [f"OK {P1} (3 records)", "1 of 2 files have problems"]
    assert lines[0].startswith(f"{P0}: the manifest lists 3 records for this file (line ")
    assert lines[1].startswith(f"{P0}: the file is 0 bytes, but the manifest records ")


@pytest.mark.parametrize("command", ["verify", "index", "check-data"])
def test_a_target_that_is_not_there_is_said_to_be_missing(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    status, out, err = cli(capsys, command, "nowhere")
    assert (status, out) == (1, [])
    assert err == [f"batchloaders {command}: error: nowhere: $: not found: expected a dataset directory (holding "
                   "__manifest__.json) or a loader config (.yaml, .yml, .json)"]
