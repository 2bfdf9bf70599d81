"""Random access through TensorFlow's file systems (read/positional.py): a global shuffle, resume by position,
read_record and ``preview --record`` on ``ram://`` (TensorFlow's in-memory file system stands in for a bucket)
and on local files forced through the file-system path, against the same files on local disk read with os.pread.

Record r of file f holds id = 1000 * f + r and a note of r % 7 + 1 bytes (records differ in size). Files hold 9,
0, 13 and 8 records (file 1 empty): 30 records. The discrete_sequence data is tests/seqdata.py's: step j of record
r of file f holds 10000 * f + 100 * r + j, its context rid = 100 * f + r.
"""
from __future__ import annotations

import io
import json
import os
import uuid

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import ResumableIterator, build_input_fn, load_config, read_record
from batchloaders.cli import describe, preview_record
from batchloaders.cli.main import main
from batchloaders.errors import ConfigError, DataError, ManifestError
from batchloaders.read.positional import FileSystemFiles, LocalFiles, Read, plan
from conftest import example, feature, flip_byte, loader_config, resumed_ids, write_manifest, write_records
from seqdata import sequence_config, write_discrete

ROOT = f"ram://remote-access-{uuid.uuid4().hex[:8]}"  # ram:// lives as long as the process: this module's own
SIZES = (9, 0, 13, 8)
IDS = sorted(1000 * f + r for f, n in enumerate(SIZES) for r in range(n))
N = len(IDS)
DISCRETE_FILES = [[(1 + r % 3, 2 + r % 2) for r in range(n)] for n in (5, 0, 8, 3)]
# The windows of 2 records a discrete_sequence epoch holds: each file's records cut into whole windows.
DISCRETE_WINDOWS = sorted((f, 2 * w) for f, records in enumerate(DISCRETE_FILES) for w in range(len(records) // 2))


def record(f: int, r: int) -> bytes:
    return example(id=("int", [1000 * f + r]), note=("string", [b"n" * (r % 7 + 1)]))


def index(directory: str) -> str:
    with pytest.raises(SystemExit) as done:
        main(["index", directory])
    assert done.value.code == 0
    return directory


def copy_tree(local: str, url: str) -> str:
    """The files of local directory ``local`` (no subdirectories) copied under ``url``."""
    tf.io.gfile.makedirs(url)
    for name in sorted(os.listdir(local)):
        tf.io.gfile.copy(os.path.join(local, name), f"{url}/{name}", overwrite=True)
    return url


def read_url(path: str) -> bytes:
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def replace_url(path: str, data: bytes) -> None:
    tf.io.gfile.remove(path)  # ram:// "wb" writes after what a file holds
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(data)


def config(d: str, random_access: str | None = None, reads_in_flight: int | None = None, **args) -> dict:
    base = dict(shuffle=True, shuffle_scope="global", seed=5, epochs=2, target_batch_size=4, resume="replay")
    cfg = loader_config(d, [("id", "id")], inputs=["id"], **{**base, **args})
    access = {"random_access": random_access, "reads_in_flight": reads_in_flight}
    cfg["args"]["dataset"]["args"].update({k: v for k, v in access.items() if v is not None})
    return cfg


def ids_of(batches) -> list[list[int]]:
    return [np.asarray(b["id"]).tolist() for b in batches]


def flat(batches) -> list[int]:
    return [i for b in batches for i in b]


def context(pipeline: int, pipelines: int) -> tf.distribute.InputContext:
    return tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=pipeline,
                                      num_replicas_in_sync=pipelines)


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> str:
    """The dataset on local disk, indexed, manifest listing every file."""
    d = str(tmp_path_factory.mktemp("remote-access") / "d")
    write_manifest(d, [feature("id", "int64", [], "int"), feature("note", "string", [], "string")])
    for f, n in enumerate(SIZES):
        write_records(os.path.join(d, f"part-{f}.tfrecords"), [record(f, r) for r in range(n)])
    return index(d)


@pytest.fixture(scope="module")
def remote(local) -> str:
    """The same data files and manifest copied to ram://, indexed there by `batchloaders index`."""
    url = f"{ROOT}/independent"
    tf.io.gfile.makedirs(url)
    for name in sorted(os.listdir(local)):
        if name.endswith(".tfrecords"):
            tf.io.gfile.copy(os.path.join(local, name), f"{url}/{name}")
    with open(os.path.join(local, "__manifest__.json")) as f:
        manifest = json.load(f)
    del manifest["files"]  # written anew by the index command, on ram://
    with tf.io.gfile.GFile(f"{url}/__manifest__.json", "w") as f:
        f.write(json.dumps(manifest))
    return index(url)


@pytest.fixture(scope="module")
def runs(local, remote) -> dict[str, list[list[int]]]:
    """The batches of one seed: local files through os.pread, ram://, local files through TensorFlow's reads."""
    return {"local": ids_of(build_input_fn(config(local))()),
            "ram": ids_of(build_input_fn(config(remote))()),
            "filesystem": ids_of(build_input_fn(config(local, "filesystem"))())}


def test_every_record_once_per_epoch_on_ram(runs):
    order = flat(runs["ram"])
    assert [len(b) for b in runs["ram"]] == [4] * 15  # 2 epochs of 30, batches of 4 across the boundary
    assert sorted(order[:N]) == IDS and sorted(order[N:]) == IDS
    assert order[:N] != order[N:] and order[:N] != IDS  # shuffled, each epoch its own order


def test_the_same_seed_gives_the_same_batches_on_every_path(runs):
    assert runs["ram"] == runs["local"]
    assert runs["filesystem"] == runs["local"]


@pytest.mark.parametrize("stop", [1, 8, 14])
def test_resume_by_position_on_ram_equals_the_uninterrupted_run(remote, runs, tmp_path, stop):
    whole, resumed = resumed_ids(config(remote), tmp_path, stop)
    assert resumed == whole == runs["local"]


@pytest.mark.parametrize("before, after", [(2, 3)])
def test_a_restart_with_another_number_of_pipelines_loses_and_repeats_nothing(remote, before, after):
    fn = build_input_fn(config(remote, target_batch_size=12))
    old = [ResumableIterator(fn, context(k, before)) for k in range(before)]
    consumed = []
    for _ in range(2):
        for iterator in old:
            consumed += np.asarray(next(iterator)["id"]).tolist()
    states = [iterator.get_state() for iterator in old]
    assert {s["position"] for s in states} == {24}
    rest = []
    for k in range(after):
        iterator = ResumableIterator(fn, context(k, after))
        iterator.set_state(states[k % before])
        rest += flat(ids_of(iterator))
    assert sorted(consumed + rest) == sorted(IDS * 2)


@pytest.fixture(scope="module")
def discrete(tmp_path_factory) -> tuple[str, str]:
    """discrete_sequence data on local disk and its copy on ram://, each indexed where it lies."""
    d = str(write_discrete(tmp_path_factory.mktemp("remote-discrete"), DISCRETE_FILES))
    url = copy_tree(d, f"{ROOT}/discrete")
    return index(d), index(url)


def discrete_config(d: str, **args) -> dict:
    return sequence_config(d, "discrete_sequence", [("rid", "rid")], inputs=["rid"], lo=2, hi=2, padding=True,
                           **{"shuffle": True, "shuffle_scope": "global", "seed": 3, "epochs": 2,
                              "target_batch_size": 3, "resume": "replay", **args})


def windows(batches) -> list[tuple[int, int]]:
    """(file, first record) of every window, each checked to be 2 consecutive records of one file."""
    out = []
    for batch in batches:
        for rid in np.asarray(batch["rid"]).tolist():
            f, r = divmod(rid[0], 100)
            assert rid == [100 * f + r, 100 * f + r + 1]
            out.append((f, r))
    return out


def test_discrete_sequence_on_ram_gives_every_window_once_per_epoch_as_on_local_disk(discrete):
    local_dir, url = discrete
    on_ram = windows(build_input_fn(discrete_config(url))())
    half = len(DISCRETE_WINDOWS)
    assert sorted(on_ram[:half]) == DISCRETE_WINDOWS and sorted(on_ram[half:]) == DISCRETE_WINDOWS
    assert on_ram[:half] != DISCRETE_WINDOWS
    assert windows(build_input_fn(discrete_config(local_dir))()) == on_ram


@pytest.mark.parametrize("offsets, sizes, most, reads", [
    ([], [], 200, []),
    ([0], [10], 200, [Read(0, 10, (0,))]),
    ([0, 10, 20], [10, 10, 10], 200, [Read(0, 30, (0, 1, 2))]),  # back to back: one read
    ([20, 0, 10], [10, 10, 10], 200, [Read(0, 30, (1, 2, 0))]),  # any order in: reads in order of offsets
    ([0, 110], [10, 10], 200, [Read(0, 120, (0, 1))]),  # a gap of 100 bytes, the most joined
    ([0, 111], [10, 10], 200, [Read(0, 10, (0,)), Read(111, 10, (1,))]),  # 101 bytes apart: two reads
    ([0, 50], [10, 10], 50, [Read(0, 10, (0,)), Read(50, 10, (1,))]),  # joined would be 60 > most
    ([0, 40], [10, 10], 50, [Read(0, 50, (0, 1))]),  # joined is 50: most
    ([0, 0, 5], [10, 10, 20], 200, [Read(0, 25, (0, 1, 2))]),  # a range twice, overlapping ranges: one read
    ([0, 200], [80, 10], 50, [Read(0, 80, (0,)), Read(200, 10, (1,))]),  # a range above most reads alone
])
def test_the_read_plan_joins_ranges_close_together(offsets, sizes, most, reads):
    assert plan(offsets, sizes, gap=100, most=most) == reads


@pytest.fixture(scope="module")
def blob_file(tmp_path_factory) -> tuple[str, str, bytes]:
    """A file of 3 MiB of numbered bytes, on ram:// and on local disk."""
    blob = np.arange(3 * 2**20, dtype=np.uint32).astype(np.uint8).tobytes()
    url = f"{ROOT}/blob/data.bin"
    tf.io.gfile.makedirs(f"{ROOT}/blob")
    with tf.io.gfile.GFile(url, "wb") as f:
        f.write(blob)
    path = str(tmp_path_factory.mktemp("blob") / "data.bin")
    with open(path, "wb") as f:
        f.write(blob)
    return url, path, blob


@pytest.mark.parametrize("offsets, sizes, reads", [
    (list(range(1000, 31000, 3000)), [300] * 10, 1),  # ten records 2,700 bytes apart: one read
    ([0, 200_000, 400_000, 600_000], [3000] * 4, 4),  # 200 KB apart: a read each
    ([2**20, 0, 2**20 + 3000, 3 * 2**20 - 100], [3000, 300, 300, 300], 3),  # and a part cut by the file's end
])
def test_neighbouring_records_are_fetched_in_fewer_reads(blob_file, offsets, sizes, reads):
    url, path, blob = blob_file
    source = FileSystemFiles([url], reads_in_flight=4)
    parts = source.read(0, offsets, sizes)
    assert source.reads == reads
    assert parts == [blob[o:o + s] for o, s in zip(offsets, sizes)]
    assert parts == LocalFiles([path]).read(0, offsets, sizes)
    assert source.read(0, [len(blob) + 10], [5]) == [b""] and source.size(0) == len(blob)


@pytest.fixture
def copy(local, request) -> str:
    """A fresh ram:// copy of the indexed local dataset, for a test that damages it."""
    return copy_tree(local, f"{ROOT}/copy-{request.node.name[-40:].replace('[', '-').replace(']', '')}-"
                            f"{uuid.uuid4().hex[:6]}")


def run_all(cfg: dict) -> None:
    for _ in build_input_fn(cfg)():
        pass


def test_a_url_file_removed_after_the_build_is_a_data_error_naming_it(copy):
    batches = build_input_fn(config(copy, epochs=1, num_prefetch=0))()
    tf.io.gfile.remove(f"{copy}/part-3.tfrecords")
    with pytest.raises(DataError, match=rf"{copy}/part-3\.tfrecords: record \d+: the file cannot be read "
                                        r"\(it is not there\)"):
        for _ in batches:
            pass


def test_a_url_file_grown_after_indexing_is_a_manifest_error_naming_it(copy):
    path = f"{copy}/part-2.tfrecords"
    size = len(read_url(path))
    replace_url(path, read_url(path) + b"\0" * 7)
    with pytest.raises(ManifestError, match=rf"data file {path}, index {path}\.index: the data file is "
                                            rf"{size + 7:,} bytes, but the index was written for a data file of "
                                            rf"{size:,} bytes"):
        build_input_fn(config(copy))


def test_a_url_file_cut_while_the_run_reads_it_is_a_data_error_naming_it(copy):
    path = f"{copy}/part-2.tfrecords"
    batches = build_input_fn(config(copy, epochs=1, num_prefetch=0))()
    blob = read_url(path)
    replace_url(path, blob[:len(blob) // 2])
    with pytest.raises(DataError, match=rf"{path}: record \d+: the data file is {len(blob) // 2:,} bytes, shorter "
                                        rf"than the {len(blob):,} its index was written for"):
        for _ in batches:
            pass


def test_a_damaged_record_on_ram_is_a_data_error_naming_it(copy):
    path = f"{copy}/part-2.tfrecords"
    blob = read_url(path)
    offset = sum(len(record(2, r)) + 16 for r in range(4))  # record 4's frame
    replace_url(path, flip_byte(blob, offset + 12 + 3))  # a byte of its payload
    with pytest.raises(DataError, match=rf"{path}: record 4: at byte {offset:,}, its payload's checksum does not "
                                        "match"):
        run_all(config(copy, epochs=1))


@pytest.mark.parametrize("args, at, said", [
    (dict(random_access="local"), "random_access", "found local with shuffle_scope global, but 4 data file"),
    (dict(data_dir="/missing"), "data_dir", "found '{root}/missing' (missing): expected an existing directory"),
    (dict(data_dir="/empty"), "data_dir", "no __manifest__.json in {root}/empty: expected the dataset manifest"),
])
def test_config_mistakes_on_urls_are_located_config_errors(remote, args, at, said):
    tf.io.gfile.makedirs(f"{ROOT}/empty")
    cfg = config(remote)
    dataset_args = cfg["args"]["dataset"]["args"]
    dataset_args.update({k: (f"{ROOT}{v}" if k == "data_dir" else v) for k, v in args.items()})
    with pytest.raises(ConfigError) as raised:
        load_config(cfg)
    (problem,) = raised.value.problems
    assert problem.path == f"$.args.dataset.args.{at}"
    assert problem.message.startswith(said.format(root=ROOT)), problem.message


def test_read_record_and_preview_on_ram(remote):
    cfg = load_config(config(remote))
    assert read_record(cfg, "part-2.tfrecords", 4)["id"].tolist() == 2004
    assert read_record(cfg, f"{remote}/part-3.tfrecords", 7)["id"].tolist() == 3007
    assert read_record(cfg, index=12)["id"].tolist() == 2003  # 9 + 0 + 3
    with pytest.raises(ConfigError, match=r"\$\.args\.dataset: found 'part-9\.tfrecords'"):
        read_record(cfg, "part-9.tfrecords", 0)
    fetched = preview_record.fetch(cfg, "part-0.tfrecords", 8)
    assert fetched.by_index and fetched.values["id"].tolist() == 8


def test_preview_record_prints_a_ram_record(remote, tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config(remote)))
    out = io.StringIO()
    assert preview_record.run(str(path), "part-2.tfrecords:4", out) == 0
    text = out.getvalue()
    assert f"record 4 of {remote}/part-2.tfrecords (read at its offset through the record index)" in text
    assert "  id: int64 []: 2004" in text


def test_describe_names_the_random_access_path(local, remote, tmp_path):
    said = {}
    for name, d, access in (("local", local, None), ("ram", remote, None), ("filesystem", local, "filesystem")):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(config(d, access, 8)))
        text, as_json = io.StringIO(), io.StringIO()
        describe.run(str(path), text)
        describe.run(str(path), as_json, as_json=True)
        line = next(line for line in text.getvalue().splitlines() if line.startswith("reading:"))
        said[name] = (line.rsplit("; random access: ", 1)[1], json.loads(as_json.getvalue())["reading"]["random_access"])
    assert said["local"] == ("positional reads of local files (os.pread)", {
        "source": "local", "reads_in_flight": None, "described": "positional reads of local files (os.pread)"})
    remote_said = "TensorFlow file system reads, 8 in flight, neighbours coalesced"
    assert said["ram"] == said["filesystem"] == (remote_said, {
        "source": "filesystem", "reads_in_flight": 8, "described": remote_said})


def test_a_url_file_the_manifest_lists_that_is_gone_is_named_before_the_run(copy):
    tf.io.gfile.remove(f"{copy}/part-3.tfrecords")
    with pytest.raises(ManifestError) as raised:
        load_config(config(copy))
    assert [(p.path, p.message.split(": it was")[0]) for p in raised.value.problems] == [
        ("$.files[3]", f"data file {copy}/part-3.tfrecords is missing, but the manifest lists it with 8 records, "
                       "which would not be read")]


def test_read_record_refuses_local_random_access_on_a_url(remote):
    cfg = load_config(config(remote, "local", shuffle=False, shuffle_scope="buffer"))
    with pytest.raises(ConfigError) as raised:
        read_record(cfg, "part-2.tfrecords", 4)
    (problem,) = raised.value.problems
    assert problem.path == "$.args.dataset.args.random_access"
    assert problem.message.startswith(f"found local, but {remote}/part-2.tfrecords is not on the local file system")
