"""The data tools on data and configs a user may not trust: no plugin code run, no traceback, no bytes quoted
from outside the dataset, no temporary file left behind; and ``index`` on a directory without a manifest.

Data: test_record_index.py's dataset d/ (part-0, part-1, part-2 of 3, 0 and 5 Examples; record r of file f
holds id = 100 f + r and note = r + 1 letters n), or test_plugins.py's project (data/ of 2 files x 3
SequenceExamples, a plugin my_steps.py that writes the file ``ran`` when imported). Commands run in-process
through ``batchloaders.cli.main.main`` from tmp_path, so printed paths are relative.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import time

import pytest

from batchloaders import ConfigError, DataError, ManifestError, build_input_fn, load_config
from batchloaders.cli import bench
from batchloaders.config.manifest import load_manifest
from batchloaders.read import record_index
from batchloaders.transform import plugins
from batchloaders.transform.registry import STEPS
from conftest import frame_offsets, loader_config, write_manifest, write_records
from test_plugin_trust import marked  # noqa: F401  (fixture)
from test_plugins import project, registry_scope  # noqa: F401  (fixtures)
from test_record_index import FEATURES, SIZES, cli, dataset, record, records, sha

NOT_UTF8 = os.fsdecode(b"part-\xff.tfrecords")  # how Linux lists a name holding the byte 0xff
RENAME = ("b'part-\\xff.tfrecords' is named with bytes that are not UTF-8 (TensorFlow opens files by UTF-8 names "
          "only): rename it")
WALK = ("expected every entry the pattern '**/*{.tfrecords,.tfrecord,.tfrec,"
        "-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]}{,.gz,.zz}' matches to be a regular file "
        "and every directory to be listable, both within data_dir")


def config_of(tmp_path, d: str = "d") -> str:
    """c.json reading the id of dataset ``d`` (batches of 2, in file order)."""
    (tmp_path / "c.json").write_text(json.dumps(loader_config(tmp_path / d, [("id", "id")], inputs=["id"])))
    return "c.json"


# ---------------------------------------------------------------- plugins

@pytest.mark.parametrize("command, out", [
    ("verify", ["OK data/part-0.tfrecords (3 records)", "OK data/part-1.tfrecords (3 records)",
                "0 of 2 files have problems"]),
    ("index", ["indexed data/part-0.tfrecords: 3 records, index 48 bytes",
               "indexed data/part-1.tfrecords: 3 records, index 48 bytes",
               "wrote 2 indexes (96 bytes, 8 per record) and data/__manifest__.json, with entries for 2 files it "
               "did not list"]),
])
def test_verify_and_index_of_a_config_run_none_of_its_plugins(marked, registry_scope, monkeypatch, capsys,
                                                              command, out):
    """They read the config's dataset only, which needs no plugin type: its plugin file is never imported."""
    monkeypatch.chdir(marked)
    assert cli(capsys, command, "c.yaml") == (0, out, [])
    assert not (marked / "ran").exists() and STEPS.get("scale") is None


@pytest.mark.parametrize("trust", [False, True], ids=["untrusted", "trusted"])
def test_a_nul_character_in_a_plugin_path_is_a_located_error(tmp_path, trust):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"type": "independent", "plugins": ["a\0b.py"], "args": {}}))
    with pytest.raises(ConfigError) as caught:
        load_config(str(path), trust_plugins=trust)
    assert [(p.path, p.message) for p in caught.value.problems][0] == (
        "$.plugins[0]", "found 'a\\x00b.py', which holds a NUL character, so it is no file's path: expected a .py "
                        "file path relative to the config's directory")


def test_a_nul_character_in_a_plugin_path_on_the_command_line_is_no_file(tmp_path):
    assert plugins.load(["a\0b.py"], base_dir=str(tmp_path), near="the working directory", scoped=False) == ([], [
        (0, "plugin file 'a\\x00b.py' does not exist (it holds a NUL character, so it is no file's path); expected "
            "a .py file relative to the working directory")])


# ---------------------------------------------------------------- index without a manifest

def test_index_of_a_directory_without_a_manifest_writes_it_first(tmp_path, monkeypatch, capsys):
    d = tmp_path / "d"
    for f in (0, 2):
        write_records(d / f"part-{f}.tfrecords", records(f))
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "index", "d")
    sizes = {f: os.path.getsize(d / f"part-{f}.tfrecords") for f in (0, 2)}
    assert (code, out) == (0, ["indexed d/part-0.tfrecords: 3 records, index 48 bytes",
                               "indexed d/part-2.tfrecords: 5 records, index 64 bytes",
                               "wrote 2 indexes (112 bytes, 8 per record) and d/__manifest__.json"])
    assert err[:3] == [
        "batchloaders index: no __manifest__.json in d: writing it first, as `batchloaders manifest d` does",
        "batchloaders index: features inferred from 8 records of 2 files (tf.train.Example, compression null): "
        "id (int64 []), note (string [])",
        f"batchloaders index: wrote d/__manifest__.json: 2 files, 8 records, {sum(sizes.values()):,} bytes"]
    assert all(line.startswith("batchloaders index: guessed: ") for line in err[3:]) and len(err) == 7
    data = json.loads((d / "__manifest__.json").read_text())
    assert [f["name"] for f in data["features"]] == ["id", "note"]
    assert data["files"] == [
        {"name": f"part-{f}.tfrecords", "num_records": SIZES[f], "size_bytes": sizes[f],
         "sha256": sha(d / f"part-{f}.tfrecords"),
         "index": {"name": f"part-{f}.tfrecords.index", "size_bytes": 24 + 8 * SIZES[f],
                   "sha256": sha(d / f"part-{f}.tfrecords.index")}} for f in (0, 2)]
    manifest = load_manifest(d / "__manifest__.json")
    assert record_index.load_index(str(d / "part-2.tfrecords"), manifest).offsets.tolist() == \
        frame_offsets(records(2))[:-1]


# ---------------------------------------------------------------- temporary files

def test_index_removes_a_temporary_manifest_of_a_killed_run(tmp_path, monkeypatch, capsys):
    """A run killed while writing the manifest leaves .__manifest__.*.tmp: the next run removes it (and only
    files of that naming made before it began)."""
    d = dataset(tmp_path)
    hour_ago, later = time.time() - 3600, time.time() + 3600
    left = {".__manifest__.killed1.tmp": hour_ago, ".__manifest__.newer.tmp": later, "notes.tmp": hour_ago}
    for name, mtime in left.items():
        with open(os.path.join(d, name), "w") as f:
            f.write("{")
        os.utime(os.path.join(d, name), (mtime, mtime))
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, "index", "d")
    assert (code, err) == (0, ["batchloaders index: removed .__manifest__.killed1.tmp, the temporary manifest of a "
                               "run stopped while writing"])
    assert sorted(n for n in os.listdir(d) if n.endswith(".tmp")) == [".__manifest__.newer.tmp", "notes.tmp"]


# ---------------------------------------------------------------- a data file name that is not UTF-8

@pytest.fixture
def not_utf8(tmp_path, monkeypatch):
    """d/part-0.tfrecords (records of file 0) and d/part-\\xff.tfrecords (records of file 1); c.json; cwd tmp_path."""
    d = tmp_path / "d"
    write_records(d / "part-0.tfrecords", records(0))
    write_records(d / "renamed", [record(1, r) for r in range(2)])
    os.rename(d / "renamed", os.path.join(d, NOT_UTF8))
    monkeypatch.chdir(tmp_path)
    return config_of(tmp_path)


def test_manifest_and_index_refuse_a_file_name_that_is_not_utf8(not_utf8, capsys):
    assert cli(capsys, "manifest", "d") == (1, [], [f"batchloaders manifest: error: d: {RENAME}"])
    assert cli(capsys, "index", "d") == (1, [], [
        "batchloaders index: no __manifest__.json in d: writing it first, as `batchloaders manifest d` does",
        f"batchloaders index: error: d: {RENAME}"])


def test_verify_check_data_and_build_input_fn_name_a_file_name_that_is_not_utf8(tmp_path, not_utf8, capsys):
    write_manifest(tmp_path / "d", FEATURES)
    assert cli(capsys, "verify", "d") == (1, ["OK d/part-0.tfrecords (3 records)", f"d: {RENAME}",
                                              "1 of 2 files have problems"], [])
    problem = f"found paths under {tmp_path / 'd'} that cannot be read: {RENAME}: {WALK}"
    with pytest.raises(ConfigError) as caught:
        build_input_fn(not_utf8)
    assert [(p.file, p.path, p.message) for p in caught.value.problems] == [
        ("c.json", "$.args.dataset.args.data_dir", problem)]
    for command in ("verify", "check-data"):
        code, out, err = cli(capsys, command, not_utf8)
        assert (code, out, len(err)) == (1, [], 1)
        assert err[0].startswith(f"batchloaders {command}: error: c.json: $.args.dataset.args.data_dir: {problem}")


# ---------------------------------------------------------------- bench over a file that is not TFRecord

def test_bench_names_the_data_file_its_survey_cannot_read(tmp_path):
    """The timed pass stops after 5 batches of 2, within part-0's 20 records; the survey reads every file
    whole and meets part-1, which is text."""
    d = tmp_path / "d"
    write_manifest(d, FEATURES)
    write_records(d / "part-0.tfrecords", [record(0, r) for r in range(20)])
    (d / "part-1.tfrecords").write_bytes(b"id,note\n100,n\n")
    path = config_of(tmp_path)
    with pytest.raises(DataError) as caught:
        bench.run(str(tmp_path / path), batches=5, seconds=600, out=io.StringIO())
    assert [(p.file, p.path, p.message) for p in caught.value.problems] == [(
        str(d / "part-1.tfrecords"), "record",
        f"cannot be read (corrupted record at 0 (Is this even a TFRecord file?)): expected a TFRecord file, as the "
        f"manifest {d / '__manifest__.json'} says; `batchloaders verify` reads every file whole and says what is "
        "wrong where")]


# ---------------------------------------------------------------- an index linked out of the dataset

def test_an_index_linked_out_of_the_dataset_is_not_read(tmp_path, monkeypatch, capsys):
    """part-2's index is replaced by a link to a file outside d/, and the manifest's record of the index by that
    file's size and SHA-256 (as one who can write the dataset could): no byte of it is shown."""
    d = dataset(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli(capsys, "index", "d")[0] == 0
    secret = tmp_path / "secret.env"
    secret.write_bytes(b"SECRET=hunter2\n" * 4)
    index = os.path.join(d, "part-2.tfrecords.index")
    os.remove(index)
    os.symlink(secret, index)
    manifest_path = os.path.join(d, "__manifest__.json")
    data = json.load(open(manifest_path))
    data["files"][2]["index"].update(size_bytes=60, sha256=hashlib.sha256(secret.read_bytes()).hexdigest())
    json.dump(data, open(manifest_path, "w"))
    why = (f"the index file is a symlink to {secret}, outside the dataset directory {d}: expected the index file "
           "`batchloaders index` writes beside its data file")
    code, out, _ = cli(capsys, "verify", "d")
    assert (code, out) == (1, ["OK d/part-0.tfrecords (3 records)", "OK d/part-1.tfrecords (0 records)",
                               f"d/part-2.tfrecords: its index d/part-2.tfrecords.index: {why} (write it again with "
                               "`batchloaders index`)", "1 of 3 files have problems"])
    data_file = os.path.join(d, "part-2.tfrecords")
    with pytest.raises(ManifestError) as caught:
        record_index.load_index(data_file, load_manifest(manifest_path))
    assert [p.message for p in caught.value.problems] == [
        f"data file {data_file}, index {index}: {why}: write the index again with `batchloaders index {d}`"]


def test_what_is_not_an_index_is_refused_without_quoting_it():
    with pytest.raises(ValueError) as caught:
        record_index.decode(b"SECRET=hunter2\n" * 4)
    assert str(caught.value) == "it is not a record index: it does not begin with b'BLRIDX\\x00\\x01', as a record " \
                                "index does"
