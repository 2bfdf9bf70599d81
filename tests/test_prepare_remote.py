"""``manifest``, ``index``, ``verify`` and ``reshard`` on a file system other than the local one: TensorFlow's
in-memory ``ram://`` stands in for a bucket (``gs://``), and gives what the same files on local disk give.

ram:// is per process: a Beam DirectRunner in ``multi_processing`` mode runs its elements in other processes,
which see an empty ram://. So the remote paths run here on this machine and on the in-process DirectRunner
(which runs the same per-file functions as any runner); test_prepare_beam.py covers the worker processes on
local files.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import uuid

import pytest
import tensorflow as tf

import batchloaders
from batchloaders.cli import reshard as reshard_command, verify, write_index, write_manifest
from batchloaders.errors import DataError, ManifestError
from batchloaders.prepare.beam import runner_from
from batchloaders.prepare.reshard import Options, reshard
from batchloaders.read.record_index import MAGIC
from conftest import example, flip_byte, loader_config, write_records

FILES = {"b/c/part-0.tfrecords": 5, "a/part-1.tfrecords": 0, "b/c/part-2.tfrecords": 12}  # name: records


def record(f: int, r: int) -> bytes:
    return example(id=("int", [100 * f + r]), note=("string", [b"x" * (r % 5)]))


def records_of(name: str) -> list[bytes]:
    f = int(name.rsplit("-", 1)[1].split(".")[0])
    return [record(f, r) for r in range(FILES[name])]


def framed(name: str) -> bytes:
    """The bytes TFRecordWriter writes for a file's records."""
    path = f"ram://framed-{uuid.uuid4().hex}/x.tfrecords"
    write_records(path, records_of(name))
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def remote_dataset() -> str:
    """FILES under a new ram:// directory (each test its own: ram:// lives as long as the process)."""
    root = f"ram://data-{uuid.uuid4().hex[:8]}"
    for name in FILES:
        tf.io.gfile.makedirs(root + "/" + name.rsplit("/", 1)[0])
        write_records(f"{root}/{name}", records_of(name))
    return root


def local_twin(root: str, tmp_path) -> str:
    """The files of ram:// ``root`` copied to local disk."""
    local = str(tmp_path / "local")
    for directory, _, names in tf.io.gfile.walk(root):
        for name in names:
            target = os.path.join(local, directory[len(root) + 1:], name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            tf.io.gfile.copy(f"{directory}/{name}", target)
    return local


def read(path: str) -> bytes:
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def replace(path: str, data: bytes) -> None:
    tf.io.gfile.remove(path)  # ram:// writes "wb" after what a file holds
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(data)


def expected_index(name: str) -> bytes:
    """A record index as record_index.encode writes it, from the record lengths: offsets of 16 bytes of framing
    plus each payload before."""
    offsets, at = [], 0
    for serialized in records_of(name):
        offsets.append(at)
        at += len(serialized) + 16
    return (MAGIC + len(offsets).to_bytes(8, "little") + at.to_bytes(8, "little")
            + b"".join(o.to_bytes(8, "little") for o in offsets))


def payload_start(name: str, r: int) -> int:
    """Where record ``r``'s payload begins: after the records before it and its own 12 bytes of header."""
    return sum(len(serialized) + 16 for serialized in records_of(name)[:r]) + 12


RUNNERS = [pytest.param(None, id="this-machine"), pytest.param("DirectRunner", id="in-process-DirectRunner")]


def needs(runner):
    if runner is not None:
        pytest.importorskip("apache_beam")


@pytest.mark.parametrize("runner", RUNNERS)
def test_manifest_index_and_verify_of_a_remote_dataset(runner, tmp_path):
    needs(runner)
    root = remote_dataset()
    local = local_twin(root, tmp_path)

    assert batchloaders.write_manifest(root, runner=runner) == f"{root}/__manifest__.json"
    manifest = json.loads(read(f"{root}/__manifest__.json"))
    order = ["a/part-1.tfrecords", "b/c/part-0.tfrecords", "b/c/part-2.tfrecords"]  # a dir dataset's order
    assert manifest["files"] == [{"name": name, "num_records": FILES[name], "size_bytes": len(framed(name)),
                                  "sha256": hashlib.sha256(framed(name)).hexdigest()} for name in order]

    written = batchloaders.write_index(root, runner=runner)
    assert written == [f"{root}/{name}.index" for name in order] + [f"{root}/__manifest__.json"]
    for name in order:  # beside its data file, as on local disk
        assert read(f"{root}/{name}.index") == expected_index(name)
    entries = json.loads(read(f"{root}/__manifest__.json"))["files"]
    assert [e["index"] for e in entries] == [
        {"name": name + ".index", "size_bytes": len(expected_index(name)),
         "sha256": hashlib.sha256(expected_index(name)).hexdigest()} for name in order]

    out = io.StringIO()
    assert verify.run(root, out, io.StringIO(), runner=runner_from(runner)) == 0
    assert out.getvalue().splitlines() == [f"OK {root}/{name} ({FILES[name]} record{'s' * (FILES[name] != 1)})"
                                           for name in order] + ["0 of 3 files have problems"]

    # The same files on local disk: the same manifest, indexes and report.
    batchloaders.write_manifest(local)
    batchloaders.write_index(local)
    for name in ["__manifest__.json"] + [n + ".index" for n in order]:
        assert read(f"{root}/{name}") == read(os.path.join(local, name)), name
    there = io.StringIO()
    assert verify.run(local, there, io.StringIO()) == 0
    assert there.getvalue().replace(local, "ROOT") == out.getvalue().replace(root, "ROOT")


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_damaged_remote_file_is_a_located_data_error_naming_its_url(runner):
    needs(runner)
    root = remote_dataset()
    damaged = f"{root}/b/c/part-2.tfrecords"
    replace(damaged, flip_byte(framed("b/c/part-2.tfrecords"), payload_start("b/c/part-2.tfrecords", 2) + 1))
    with pytest.raises(DataError) as caught:
        batchloaders.write_manifest(root, runner=runner)
    assert [(p.file, p.path) for p in caught.value.problems] == [(damaged, "record 2")]
    assert not tf.io.gfile.exists(f"{root}/__manifest__.json")


def test_verify_names_a_remote_file_that_changed_after_the_manifest():
    root = remote_dataset()
    batchloaders.write_manifest(root)
    batchloaders.write_index(root)
    changed = f"{root}/b/c/part-0.tfrecords"
    replace(changed, framed("b/c/part-0.tfrecords")[:-40])  # cut inside its last record
    out = io.StringIO()
    assert verify.run(root, out, io.StringIO()) == 1
    lines = out.getvalue().splitlines()
    assert any(line.startswith(f"{changed}: ") for line in lines), lines
    assert lines[-1] == "1 of 3 files have problems"
    with pytest.raises(DataError) as caught:
        batchloaders.write_index(root)
    assert {p.file for p in caught.value.problems} == {changed}


def test_index_refuses_a_remote_file_outside_the_manifests_directory(tmp_path):
    """A config's list may name a file anywhere; its index could not be recorded by a name in the manifest."""
    root = remote_dataset()
    local = local_twin(root, tmp_path)
    batchloaders.write_manifest(local)
    (tmp_path / "files.txt").write_text(f"{root}/b/c/part-0.tfrecords\n")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(loader_config(
        local, [("id", "id")], inputs=["id"],
        dataset={"type": "list", "args": {"list_file": str(tmp_path / "files.txt"),
                                          "manifest_file": f"{local}/__manifest__.json"}})))
    err = io.StringIO()
    assert write_index.run(str(config), io.StringIO(), err) == 1
    assert f"{root}/b/c/part-0.tfrecords: not a file under the manifest's directory" in err.getvalue()


def unlisted_source(tmp_path) -> tuple[str, str]:
    """A dataset directory whose manifest does not list its newest file."""
    src = str(tmp_path / "src")
    write_records(os.path.join(src, "in-0.tfrecords"), [record(0, r) for r in range(4)])
    batchloaders.write_manifest(src)
    write_records(os.path.join(src, "later", "in-1.tfrecords"), [record(1, r) for r in range(3)])
    return src, str(tmp_path / "dest")


def test_reshard_refuses_data_files_the_manifest_does_not_list(tmp_path):
    src, dest = unlisted_source(tmp_path)
    with pytest.raises(ManifestError, match=r"__manifest__\.json: \$\.files: found 1 data file under .* that the "
                                            r"manifest does not list \(later/in-1\.tfrecords\): their records "
                                            r"would be left out of DEST.*batchloaders manifest.*"
                                            r"--leave-out-unlisted"):
        reshard(src, dest, Options(2))
    assert not os.path.exists(dest)


def test_reshard_leaves_them_out_when_asked_and_says_so(tmp_path):
    src, dest = unlisted_source(tmp_path)
    err = io.StringIO()
    assert reshard_command.run(src, dest, Options(2, leave_out_unlisted=True), out=io.StringIO(), err=err) == 0
    assert "warning: left out 1 data file SRC's manifest does not list (later/in-1.tfrecords)" in err.getvalue()
    assert sum(e["num_records"] for e in json.loads(read(f"{dest}/__manifest__.json"))["files"]) == 4


def test_the_python_api_takes_leave_out_unlisted_as_a_keyword(tmp_path):
    src, dest = unlisted_source(tmp_path)
    with pytest.raises(ManifestError, match=r"\(later/in-1\.tfrecords\)"):
        batchloaders.reshard(src, dest, 2)
    batchloaders.reshard(src, dest, 2, leave_out_unlisted=True)
    entries = json.loads(read(f"{dest}/__manifest__.json"))["files"]
    assert [(e["name"], e["num_records"]) for e in entries] == [("part-00000-of-00002.tfrecords", 2),
                                                                ("part-00001-of-00002.tfrecords", 2)]


def test_reshard_of_a_remote_source_checks_its_listing_too():
    root = remote_dataset()
    batchloaders.write_manifest(root)
    write_records(f"{root}/z.tfrecords", [record(9, 0)])
    with pytest.raises(ManifestError, match=r"\(z\.tfrecords\)"):
        reshard(root, f"{root}-out", Options(2))
