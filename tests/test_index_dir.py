"""Record indexes written apart from the data (``index_dir``): ``batchloaders index DIR --index-dir PATH`` and
``write_index(path, index_dir=PATH)`` write the indexes and ``__index_manifest__.json`` there and nothing in DIR;
a config with ``args.dataset.args.index_dir`` reads them; a stale or missing one is a located error.

Record r of file f holds id = 100 * f + r and a note of r % 5 + 1 bytes (records differ in size, so offsets
do not fall on a grid). Files hold 6, 0 and 9 records (file 1 empty): 15 records.

DIR is kept read-only for real where that works: chmod -w, and when running as root (where chmod does not stop
a write) ``chattr +i`` on DIR and its files (skipped when neither takes effect). Every test that writes to an
index_dir also compares DIR's listing and every byte before and after.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import subprocess
import uuid

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import build_input_fn, load_config, load_manifest, write_index, write_manifest
from batchloaders.cli.main import main
from batchloaders.errors import ConfigError, ManifestError
from batchloaders.read.record_index import RecordIndex, encode, load_index
from conftest import feature, frame_offsets, loader_config, write_manifest as write_features, write_records
from conftest import example

SIZES = (6, 0, 9)
IDS = sorted(100 * f + r for f, n in enumerate(SIZES) for r in range(n))
NAMES = [f"part-{f}.tfrecords" for f in range(len(SIZES))]


def record(f: int, r: int) -> bytes:
    return example(id=("int", [100 * f + r]), note=("string", [b"n" * (r % 5 + 1)]))


RECORDS = [[record(f, r) for r in range(n)] for f, n in enumerate(SIZES)]


def dataset(directory, *, listed: bool = True) -> str:
    """The dataset in ``directory``; its manifest lists the files (with sizes and SHA-256) when ``listed``,
    else declares the features only."""
    d = str(directory)
    write_features(d, [feature("id", "int64", [], "int"), feature("note", "string", [], "string")])
    for name, records in zip(NAMES, RECORDS):
        write_records(os.path.join(d, name), records)
    if listed:
        write_manifest(d)
    return d


def snapshot(directory: str) -> dict:
    """Every file under ``directory`` (a local path or a URL) by relative name, with its bytes."""
    out = {}
    for root, _, names in tf.io.gfile.walk(directory):
        for name in names:
            path = tf.io.gfile.join(root, name)
            out[path[len(directory):]] = tf.io.gfile.GFile(path, "rb").read()
    return out


def expected_index(f: int) -> bytes:
    offsets = frame_offsets(RECORDS[f])
    return encode(RecordIndex(np.asarray(offsets[:-1], np.int64), offsets[-1]))


def expected_entries(d: str) -> list[dict]:
    out = []
    for f, name in enumerate(NAMES):
        data, index = open(os.path.join(d, name), "rb").read(), expected_index(f)
        out.append({"name": name, "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                    "num_records": SIZES[f], "index": {"name": name + ".index", "size_bytes": len(index),
                                                       "sha256": hashlib.sha256(index).hexdigest()}})
    return out


def config(d: str, index_dir: str | None) -> dict:
    cfg = loader_config(d, [("id", "id")], inputs=["id"], shuffle=True, shuffle_scope="global", seed=3,
                        epochs=1, target_batch_size=4)
    if index_dir is not None:
        cfg["args"]["dataset"]["args"]["index_dir"] = index_dir
    return cfg


def ids_of(cfg: dict) -> list[list[int]]:
    return [np.asarray(b["id"]).tolist() for b in build_input_fn(cfg)()]


def run(*argv: str) -> int:
    with pytest.raises(SystemExit) as done:
        main(list(argv))
    return done.value.code


@contextlib.contextmanager
def read_only(directory: str):
    """``directory`` and its files made unwritable for real for the block, or the test skipped."""
    entries = [os.path.join(directory, name) for name in os.listdir(directory)] + [directory]
    modes = {path: os.stat(path).st_mode for path in entries}
    for path in entries:
        os.chmod(path, modes[path] & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    immutable = []
    try:
        if os.access(directory, os.W_OK):  # root: chmod does not stop a write, an immutable file does
            for path in entries:
                if subprocess.run(["chattr", "+i", path], capture_output=True).returncode == 0:
                    immutable.append(path)
            probe = os.path.join(directory, "probe")
            try:
                open(probe, "w").close()
                os.unlink(probe)
                pytest.skip("neither chmod -w nor chattr +i makes a directory read-only here")
            except OSError:
                pass
        yield
    finally:
        for path in immutable:
            subprocess.run(["chattr", "-i", path], check=True)
        for path, mode in modes.items():
            os.chmod(path, mode)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    return dataset(tmp_path_factory.mktemp("apart") / "d")


@pytest.fixture(scope="module")
def apart(data, tmp_path_factory) -> str:
    """``data`` indexed into a local index_dir while it is read-only."""
    index_dir = str(tmp_path_factory.mktemp("indexes") / "ix")
    before = snapshot(data)
    with read_only(data):
        written = write_index(data, index_dir=index_dir)
    assert snapshot(data) == before
    assert written == [os.path.join(index_dir, n + ".index") for n in NAMES] + [
        os.path.join(index_dir, "__index_manifest__.json")]
    return index_dir


@pytest.mark.parametrize("listed", [True, False], ids=["manifest-lists-files", "manifest-lists-none"])
def test_index_dir_holds_exact_indexes_and_entries_and_dir_is_unchanged(listed, data, apart, tmp_path):
    """With sizes and SHA-256 from the manifest, or (none listed) computed while indexing: the same entries."""
    if listed:
        d, index_dir = data, apart
    else:
        d, index_dir = dataset(tmp_path / "d", listed=False), str(tmp_path / "ix")
        before = snapshot(d)
        with read_only(d):
            write_index(d, index_dir=index_dir)
        assert snapshot(d) == before
    for f, name in enumerate(NAMES):
        assert open(os.path.join(index_dir, name + ".index"), "rb").read() == expected_index(f)
    assert json.load(open(os.path.join(index_dir, "__index_manifest__.json"))) == {
        "format": "batchloaders-index-manifest", "version": 1, "files": expected_entries(d)}
    assert sorted(os.listdir(index_dir)) == sorted([n + ".index" for n in NAMES] + ["__index_manifest__.json"])


def test_cli_writes_a_ram_index_dir_and_global_shuffle_reads_it_as_it_reads_sidecars(data, apart, tmp_path):
    index_dir = f"ram://index-dir-{uuid.uuid4().hex}/ix"
    before = snapshot(data)
    assert run("index", data, "--index-dir", index_dir) == 0
    assert snapshot(data) == before
    written = snapshot(index_dir)
    assert written == {f"/{n}.index": expected_index(f) for f, n in enumerate(NAMES)} | {
        "/__index_manifest__.json": open(os.path.join(apart, "__index_manifest__.json"), "rb").read()}
    beside = shutil.copytree(data, tmp_path / "beside")
    assert run("index", str(beside)) == 0
    sidecar = ids_of(config(str(beside), None))
    assert sorted(i for b in sidecar for i in b) == IDS and [len(b) for b in sidecar] == [4, 4, 4, 3]
    assert ids_of(config(data, index_dir)) == sidecar
    assert ids_of(config(data, apart)) == sidecar
    assert run("verify", data, "--index-dir", index_dir) == 0


def stale_data(d: str, index_dir: str) -> str:
    write_records(os.path.join(d, NAMES[2]), RECORDS[2][:-1])  # rewritten: one record fewer, fewer bytes
    return "the data file is"


def edited_index(d: str, index_dir: str) -> str:
    path = os.path.join(index_dir, NAMES[2] + ".index")
    blob = open(path, "rb").read()
    open(path, "wb").write(blob[:-1] + bytes([blob[-1] ^ 1]))  # the last offset, off by one
    return "the index file's SHA-256 is"


def missing_index(d: str, index_dir: str) -> str:
    os.unlink(os.path.join(index_dir, NAMES[2] + ".index"))
    return "the index file is missing"


@pytest.mark.parametrize("change", [stale_data, edited_index, missing_index])
def test_a_stale_or_missing_index_is_a_located_manifest_error_naming_both_files(change, data, apart, tmp_path):
    d, index_dir = str(shutil.copytree(data, tmp_path / "d")), str(shutil.copytree(apart, tmp_path / "ix"))
    manifest = load_manifest(os.path.join(d, "__manifest__.json"))
    assert load_index(os.path.join(d, NAMES[2]), manifest, index_dir).num_records == SIZES[2]
    said = change(d, index_dir)
    with pytest.raises(ManifestError) as raised:
        load_index(os.path.join(d, NAMES[2]), manifest, index_dir)
    (problem,) = raised.value.problems
    assert problem.file == os.path.join(index_dir, "__index_manifest__.json")
    assert problem.path == "$.files[2]"
    assert problem.message.startswith(f"data file {os.path.join(d, NAMES[2])}, index "
                                      f"{os.path.join(index_dir, NAMES[2] + '.index')}: {said}")
    assert problem.message.endswith(f"write the index again with `batchloaders index {d} --index-dir {index_dir}`")
    assert load_index(os.path.join(d, NAMES[0]), manifest, index_dir).num_records == SIZES[0]  # the others are fine


def test_verify_with_index_dir_names_a_stale_index(data, apart, tmp_path, capsys):
    d, index_dir = str(shutil.copytree(data, tmp_path / "d")), str(shutil.copytree(apart, tmp_path / "ix"))
    assert run("verify", d, "--index-dir", index_dir) == 0
    capsys.readouterr()
    edited_index(d, index_dir)
    assert run("verify", d, "--index-dir", index_dir) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[0] for line in lines[:-1] if not line.startswith("OK ")] == [
        os.path.join(d, NAMES[2])]
    assert f"its index {os.path.join(index_dir, NAMES[2] + '.index')}: the index file's SHA-256 is" in lines[2]


def test_an_index_dir_without_its_index_manifest_or_an_entry_is_a_config_error_at_index_dir(data, apart, tmp_path):
    for index_dir, found in [(str(tmp_path / "empty"), "which holds no __index_manifest__.json"),
                             (str(tmp_path / "ix"), f"records no index for 1 data file(s) ({data}/{NAMES[1]})")]:
        if index_dir.endswith("ix"):
            shutil.copytree(apart, index_dir)
            document = json.load(open(os.path.join(index_dir, "__index_manifest__.json")))
            del document["files"][1]
            json.dump(document, open(os.path.join(index_dir, "__index_manifest__.json"), "w"))
        with pytest.raises(ConfigError) as raised:
            load_config(config(data, index_dir))
        (problem,) = raised.value.problems
        assert problem.path == "$.args.dataset.args.index_dir"
        assert found in problem.message
        assert problem.message.endswith(f"`batchloaders index {data} --index-dir {index_dir}` writes there, "
                                        "with __index_manifest__.json")


def test_index_dir_needs_the_manifest_in_dir_and_writes_nothing_without_it(tmp_path):
    d = str(tmp_path / "d")
    for name, records in zip(NAMES, RECORDS):
        write_records(os.path.join(d, name), records)
    before = snapshot(d)
    with pytest.raises(ManifestError) as raised:
        write_index(d, index_dir=str(tmp_path / "ix"))
    assert "batchloaders manifest" in str(raised.value)
    assert snapshot(d) == before and not os.path.exists(tmp_path / "ix")


def test_on_a_beam_runner_the_same_index_dir_is_written(tmp_path):
    """One Beam element per file (the SHA-256 of files the manifest does not list read there too)."""
    pytest.importorskip("apache_beam")
    d = dataset(tmp_path / "d", listed=False)
    before = snapshot(d)
    with read_only(d):
        write_index(d, index_dir=str(tmp_path / "ix"), runner="DirectRunner")
    assert snapshot(d) == before
    assert snapshot(str(tmp_path / "ix")) == {f"/{n}.index": expected_index(f) for f, n in enumerate(NAMES)} | {
        "/__index_manifest__.json": (json.dumps({"format": "batchloaders-index-manifest", "version": 1,
                                                 "files": expected_entries(d)}, indent=2) + "\n").encode()}


@pytest.mark.parametrize("apart_dir", [False, True], ids=["beside", "index_dir"])
def test_index_config_indexes_the_dataset_of_a_global_shuffle_config_that_needs_it(apart_dir, tmp_path):
    """`batchloaders index CONFIG` on a global-shuffle config whose files have no index yet (the config check's
    own advice) writes them, where the config says, and the config then builds."""
    d = dataset(tmp_path / "data")
    index_dir = str(tmp_path / "ix") if apart_dir else None
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config(d, index_dir)))
    with pytest.raises(ConfigError, match="batchloaders index"):
        load_config(str(path))
    assert run("index", str(path)) == 0
    got = ids_of(config(d, index_dir))
    assert sorted(i for b in got for i in b) == IDS
    written = sorted(os.listdir(index_dir)) if apart_dir else sorted(n for n in os.listdir(d) if n.endswith(".index"))
    assert written == sorted([n + ".index" for n in NAMES] + (["__index_manifest__.json"] if apart_dir else []))


def test_read_record_reads_at_the_offset_the_index_dir_gives(data, apart, recwarn):
    """read_record with index_dir: the record at its offset (no warning of a read from the file's start), and a
    stale index there is the located ManifestError, as for a global shuffle."""
    from batchloaders import read_record

    cfg = config(data, apart)
    assert int(read_record(cfg, NAMES[2], 7)["id"]) == 207
    assert int(read_record(cfg, index=6 + 8)["id"]) == 208
    assert not [w for w in recwarn if "from its start" in str(w.message) or "index" in str(w.message)]
    path = os.path.join(apart, NAMES[2] + ".index")
    kept = open(path, "rb").read()
    try:
        edited_index(data, apart)
        with pytest.raises(ManifestError, match="the index file's SHA-256 is"):
            read_record(cfg, NAMES[2], 7)
    finally:
        open(path, "wb").write(kept)  # (the module's index_dir, shared)


def test_an_index_dir_on_a_file_system_tensorflow_lacks_is_a_config_error_at_index_dir(data):
    with pytest.raises(ConfigError) as raised:
        load_config(config(data, "nosuchfs://bucket/indexes"))
    text = str(raised.value)
    assert "$.args.dataset.args.index_dir:" in text and "cannot be read" in text and "nosuchfs" in text
