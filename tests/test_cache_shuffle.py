"""``shuffle_scope: global`` through a local shard cache (``args.dataset.args.cache``): GZIP, ZLIB and plain files
on local disk and on ``ram://`` give exactly the batches of their uncompressed, indexed twin read where it lies;
the cache never holds more than ``max_bytes`` plus one file while an epoch runs; a second run uses the copies;
``shuffle_window_files`` with room for its window; resume by position; and the refusals.

Record r of file f holds id = 100 * f + r and a note of 200 + r % 7 bytes (records differ in size; a copy's
index and entry are small beside its data). Files hold
SIZES records (one empty): the twins are written from the same records.
"""
from __future__ import annotations

import json
import os
import threading
import warnings
import uuid

import numpy as np
import pytest
import tensorflow as tf

import batchloaders
from batchloaders.core.model import CacheSpec
from batchloaders.errors import ConfigError, DataError
from conftest import example, feature, loader_config, resumed_ids, write_records

SIZES = (40, 0, 33, 47, 38, 41)
IDS = sorted(100 * f + r for f, n in enumerate(SIZES) for r in range(n))
SUFFIX = {None: "", "gzip": ".gz", "zlib": ".zz"}


def records(f: int) -> list[bytes]:
    return [example(id=("int", [100 * f + r]), note=("string", [b"n" * (200 + r % 7)])) for r in range(SIZES[f])]


def dataset(root: str, compression: str | None) -> str:
    """The files under ``root`` (a local directory or a ram:// URL), with a manifest listing them."""
    tf.io.gfile.makedirs(root)
    with tf.io.gfile.GFile(f"{root}/__manifest__.json", "w") as f:
        f.write(json.dumps({"compression": compression, "features": [
            feature("id", "int64", [], "int"), feature("note", "string", [], "string")]}))
    for f in range(len(SIZES)):
        write_records(f"{root}/part-{f}.tfrecords{SUFFIX[compression]}", records(f), compression=compression)
    batchloaders.write_manifest(root)
    return root


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    base = tmp_path_factory.mktemp("cache-shuffle")
    plain = dataset(str(base / "plain"), None)
    batchloaders.write_index(plain)
    ram = f"ram://cache-shuffle-{uuid.uuid4().hex[:8]}"
    return {"plain": plain, "gzip": dataset(str(base / "gzip"), "gzip"), "zlib": dataset(str(base / "zlib"), "zlib"),
            "ram-gzip": dataset(f"{ram}/gzip", "gzip"), "ram-plain": dataset(f"{ram}/plain", None), "base": base}


def config(root: str, cache: dict | None = None, loader: str = "independent", **args) -> dict:
    cfg = loader_config(root, [("id", "id")], inputs=["id"], loader=loader, shuffle=True, shuffle_scope="global",
                        seed=7, epochs=2, target_batch_size=8)
    cfg["args"].update(args)
    if cache is not None:
        cfg["args"]["dataset"]["args"]["cache"] = cache
    return cfg


def ids_of(cfg: dict) -> list[list[int]]:
    return [np.asarray(b["id"]).tolist() for b in batchloaders.build_input_fn(cfg)()]


def copies(cache_dir: str) -> dict[str, int]:
    """The complete copies in a cache directory, by name, with their sizes."""
    names = os.listdir(cache_dir) if os.path.isdir(cache_dir) else []
    out = {}
    for n in names:
        if n.endswith(".data") and n[:-len(".data")] + ".meta" in names:
            try:
                out[n] = os.path.getsize(os.path.join(cache_dir, n))
            except FileNotFoundError:  # (evicted between the listing and the look)
                pass
    return out


def cached_bytes(cache_dir: str) -> int:
    """Bytes of every file the cache holds now, temporaries included."""
    total = 0
    for name in os.listdir(cache_dir):
        try:
            total += os.path.getsize(os.path.join(cache_dir, name))
        except FileNotFoundError:  # (removed between the listing and the look)
            pass
    return total


@pytest.fixture(scope="module")
def twin(data):
    """The uncompressed twin's batches, read at the offsets of its indexes beside the files (no cache)."""
    got = ids_of(config(data["plain"]))
    flat = sum(got, [])  # (batches run on across the epochs' boundary)
    assert sorted(flat[:len(IDS)]) == IDS and sorted(flat[len(IDS):]) == IDS and flat[:len(IDS)] != IDS
    return got


@pytest.mark.parametrize("name", ["gzip", "zlib", "plain", "ram-gzip", "ram-plain"])
def test_cached_dataset_gives_the_batches_of_its_uncompressed_twin(name, data, twin, tmp_path):
    cache = str(tmp_path / "cache")
    assert ids_of(config(data[name], {"dir": cache, "max_bytes": 10**6})) == twin
    assert len(copies(cache)) == len(SIZES)


def test_the_cache_stays_within_max_bytes_plus_one_file_while_the_epoch_runs(data, twin, tmp_path):
    """Room for two of the five copies that hold records: every read may copy and evict; a thread measures the
    directory all along."""
    cache = str(tmp_path / "cache")
    largest = max(len(b"".join(records(f))) + 16 * SIZES[f] for f in range(len(SIZES)))
    budget = 2 * largest
    seen, stop = [], threading.Event()

    def watch():
        while not stop.is_set():
            if os.path.isdir(cache):
                seen.append(cached_bytes(cache))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        got = ids_of(config(data["gzip"], {"dir": cache, "max_bytes": budget}))
    finally:
        stop.set()
        watcher.join()
    assert got == twin
    assert len(seen) > 10 and max(seen) <= budget + largest + 4096  # (+ the lock file and small sidecars)
    assert sum(copies(cache).values()) <= budget


def test_a_second_run_reads_the_copies_the_first_made(data, twin, tmp_path):
    cache = str(tmp_path / "cache")
    cfg = config(data["ram-gzip"], {"dir": cache, "max_bytes": 10**6})
    assert ids_of(cfg) == twin
    inodes = {n: os.stat(os.path.join(cache, n)).st_ino for n in copies(cache)}
    assert ids_of(cfg) == twin
    assert {n: os.stat(os.path.join(cache, n)).st_ino for n in copies(cache)} == inodes  # not copied again


def test_window_files_with_room_for_two_windows_reads_each_record_once_per_epoch(data, tmp_path):
    """Windows of 2 files, room for 2 windows (the window read and the one fetched ahead): each window's records
    together in the order, every record once per epoch, the same batches as the twin's with the same window."""
    cache = str(tmp_path / "cache")
    largest = max(len(b"".join(records(f))) + 16 * SIZES[f] for f in range(len(SIZES)))
    want = ids_of(config(data["plain"], shuffle_window_files=2))
    got = ids_of(config(data["gzip"], {"dir": cache, "max_bytes": 4 * largest}, shuffle_window_files=2))
    assert got == want
    flat = sum(got, [])
    assert sorted(flat[:len(IDS)]) == IDS and sorted(flat[len(IDS):]) == IDS
    assert len([n for n, size in copies(cache).items() if size]) <= 4  # (the empty file's copy takes nothing)


def test_resume_by_position_through_the_cache_equals_the_whole_run(data, tmp_path):
    cfg = config(data["ram-gzip"], {"dir": str(tmp_path / "cache"), "max_bytes": 10**6})
    for stop in (3, 29):
        whole, resumed = resumed_ids(cfg, tmp_path, stop)
        assert resumed == whole and sorted(sum(whole, [])) == sorted(IDS * 2)


def test_discrete_sequence_windows_through_the_cache(data, tmp_path):
    """Windows of 3 records of one file, permuted globally: the same windows as the twin's."""
    def cfg(root, cache=None):
        c = config(root, cache, loader="discrete_sequence", min_window=3, max_window=3)
        c["args"]["primary_features"] = [{"from_name": "id", "to_name": "id"}]
        return c

    want = [b["id"].numpy().tolist() for b in batchloaders.build_input_fn(cfg(data["plain"]))()]
    got = [b["id"].numpy().tolist() for b in batchloaders.build_input_fn(
        cfg(data["gzip"], {"dir": str(tmp_path / "cache"), "max_bytes": 10**6}))()]
    assert got == want
    windows = [w for b in got for w in b]
    assert all(w[1] == w[0] + 1 and w[2] == w[0] + 2 and w[0] % 100 % 3 == 0 for w in windows)


def test_compressed_without_a_cache_is_refused_naming_both_ways_out(data):
    with pytest.raises(ConfigError) as raised:
        batchloaders.load_config(config(data["gzip"]))
    text = str(raised.value)
    assert "$.args.shuffle_scope" in text and "GZIP-compressed" in text
    assert "args.dataset.args.cache" in text and "batchloaders reshard" in text


def test_a_file_larger_than_max_bytes_stops_the_run_naming_it(data, tmp_path):
    fn = batchloaders.build_input_fn(config(data["gzip"], {"dir": str(tmp_path / "cache"), "max_bytes": 100}))
    with pytest.raises(DataError) as raised:
        list(fn())
    text = str(raised.value)
    assert "part-" in text and "$.args.dataset.args.cache.max_bytes" in text


def test_a_source_that_changed_after_the_manifest_stops_the_run_naming_it(data, tmp_path):
    root = dataset(str(tmp_path / "changed"), "gzip")
    fn = batchloaders.build_input_fn(config(root, {"dir": str(tmp_path / "cache"), "max_bytes": 10**6}))
    write_records(f"{root}/part-3.tfrecords.gz", records(3)[:-1], compression="gzip")  # one record fewer, now
    with pytest.raises(DataError) as raised:
        list(fn())
    assert "part-3.tfrecords.gz: record " in str(raised.value) and "the manifest records" in str(raised.value)


def test_window_files_with_room_for_one_window_never_hold_more_than_its_files(data, tmp_path):
    """Windows of 2 files and room for exactly 2 (files of known size: each copy evicts before it is made):
    no more than 2 copies exist at any moment of the epoch, and every record comes once per epoch."""
    cache = str(tmp_path / "cache")
    largest = max(len(b"".join(records(f))) + 16 * SIZES[f] for f in range(len(SIZES)))
    most, stop = [0], threading.Event()

    def watch():
        while not stop.is_set():
            most[0] = max(most[0], len([n for n, size in copies(cache).items() if size]))  # (but the empty file)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        room = 2 * CacheSpec.copy_bytes(largest, max(SIZES))  # (a copy: its data, index and entry)
        got = ids_of(config(data["ram-plain"], {"dir": cache, "max_bytes": room}, shuffle_window_files=2))
    finally:
        stop.set()
        watcher.join()
    assert got == ids_of(config(data["plain"], shuffle_window_files=2))
    assert most[0] == 2


def test_a_source_rewritten_under_a_manifest_without_checksums_is_copied_again(tmp_path):
    """A manifest whose entries record counts only (no size, no SHA-256): a data file rewritten with the same
    count between two runs is copied again (its modification time changed), so the second run reads the new
    records, not the old copy."""
    root = dataset(str(tmp_path / "d"), "gzip")
    path = os.path.join(root, "__manifest__.json")
    manifest = json.load(open(path))
    for entry in manifest["files"]:
        del entry["size_bytes"], entry["sha256"]
    json.dump(manifest, open(path, "w"))
    cfg = config(root, {"dir": str(tmp_path / "cache"), "max_bytes": 10**6}, epochs=1)
    assert sorted(sum(ids_of(cfg), [])) == IDS
    write_records(f"{root}/part-3.tfrecords.gz", [example(id=("int", [9000 + r]), note=("string", [b""]))
                                                  for r in range(SIZES[3])], compression="gzip")
    later = os.stat(f"{root}/part-3.tfrecords.gz").st_mtime_ns + 5 * 10**9
    os.utime(f"{root}/part-3.tfrecords.gz", ns=(later, later))  # (TensorFlow's stat tells whole seconds)
    got = sorted(sum(ids_of(cfg), []))
    assert got == sorted([i for i in IDS if i // 100 != 3] + [9000 + r for r in range(SIZES[3])])


def refusal(data, tmp_path, change) -> str:
    cfg = config(data["gzip"], {"dir": str(tmp_path / "cache"), "max_bytes": 10**6})
    change(cfg["args"])
    with pytest.raises(ConfigError) as raised:
        batchloaders.load_config(cfg)
    return str(raised.value)


@pytest.mark.parametrize("change, where, says", [
    (lambda a: a.update(shuffle_scope="buffer", num_shuffle_buffer_elements=8, num_filenames_shuffle_buffer=2,
                        num_mix_files=2), "$.args.dataset.args.cache:", "only shuffle_scope global"),
    (lambda a: a["dataset"]["args"].update(random_access="filesystem"), "$.args.dataset.args.random_access:",
     "expected no random_access (or auto) with a cache"),
    (lambda a: a["dataset"]["args"]["cache"].update(dir="gs://bucket/cache"), "$.args.dataset.args.cache.dir:",
     "expected a local directory"),
    (lambda a: a["dataset"]["args"].update(index_dir="ix"), "$.args.dataset.args.index_dir:",
     "expected no index_dir with a cache"),
], ids=["buffer", "random_access", "url-dir", "index_dir"])
def test_a_cache_that_would_be_ignored_or_cannot_be_local_is_refused(change, where, says, data, tmp_path):
    text = refusal(data, tmp_path, change)
    assert where in text and says in text
    assert not os.path.exists("gs:")  # (no local folder made of the URL)


def test_max_bytes_below_an_uncompressed_copy_is_refused_before_the_run(data, tmp_path):
    """Uncompressed files' sizes are in the manifest: a cache too small for the largest copy (data, index and
    entry) is a ConfigError at max_bytes when the config is loaded, naming the file and the size it needs."""
    largest = len(b"".join(records(3))) + 16 * SIZES[3]  # part-3 holds the most bytes
    needs = CacheSpec.copy_bytes(largest, SIZES[3])
    cfg = config(data["ram-plain"], {"dir": str(tmp_path / "cache"), "max_bytes": needs - 1})
    with pytest.raises(ConfigError) as raised:
        batchloaders.load_config(cfg)
    text = str(raised.value)
    assert "$.args.dataset.args.cache.max_bytes:" in text and f"found {needs - 1:,}" in text
    assert "part-3.tfrecords" in text and f"expected at least {needs:,}" in text
    cfg["args"]["dataset"]["args"]["cache"]["max_bytes"] = needs
    assert sorted(sum(ids_of(cfg), [])) == sorted(IDS * 2)


def test_describe_names_the_cache_as_the_random_access_path(data, tmp_path):
    import io

    from batchloaders.cli import describe

    cache = str(tmp_path / "cache")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config(data["gzip"], {"dir": cache, "max_bytes": 5_000_000})))
    text, as_json = io.StringIO(), io.StringIO()
    describe.run(str(path), text)
    describe.run(str(path), as_json, as_json=True)
    line = next(line for line in text.getvalue().splitlines() if line.startswith("reading:"))
    said = (f"positional reads of local copies in the shard cache {cache} (at most 5,000,000 bytes; GZIP and ZLIB "
            "decompressed, each file's offsets found as it is copied), the files the epoch reads next fetched ahead")
    assert "byte offsets (each file's copy in the cache)" in line and line.endswith("; random access: " + said)
    assert json.loads(as_json.getvalue())["reading"]["random_access"] == {
        "source": "cache", "reads_in_flight": None, "described": said}


def test_read_record_of_a_compressed_file_says_what_would_make_it_instant(data):
    """A GZIP file cannot be indexed: read_record reads it from its start and its warning names reshard, not
    `batchloaders index` (which refuses compressed data)."""
    cfg = config(data["gzip"])
    cfg["args"].update(shuffle=False)
    del cfg["args"]["shuffle_scope"]
    with pytest.warns(UserWarning) as warned:
        got = batchloaders.read_record(cfg, "part-4.tfrecords.gz", 6)
    assert int(got["id"]) == 406
    text = str(warned[0].message)
    assert "batchloaders reshard SRC DEST --shards N" in text and "`batchloaders index`" not in text


def test_a_source_rewritten_to_its_manifest_size_after_it_was_copied_stops_the_run(tmp_path):
    """The manifest records size and SHA-256; the source is rewritten (same size, other bytes) after a run
    copied it: the next run copies it again, and the copy's check against the manifest names the file."""
    root = dataset(str(tmp_path / "d"), None)
    cfg = config(root, {"dir": str(tmp_path / "cache"), "max_bytes": 10**6}, epochs=1)
    assert sorted(sum(ids_of(cfg), [])) == IDS
    path = f"{root}/part-2.tfrecords"
    blob = open(path, "rb").read()
    first = records(2)[0]
    changed = blob.replace(first, first.replace(b"n" * 8, b"m" * 8, 1), 1)  # (its checksums now fail too)
    open(path, "wb").write(changed)
    later = os.stat(path).st_mtime_ns + 5 * 10**9
    os.utime(path, ns=(later, later))  # (TensorFlow's stat tells whole seconds)
    with pytest.raises(DataError) as raised:
        ids_of(cfg)
    assert "part-2.tfrecords: record " in str(raised.value) and "SHA-256" in str(raised.value)


def test_a_cache_smaller_than_what_the_epoch_reads_at_once_is_warned_of(data, tmp_path):
    """Uncompressed files of known sizes: a cache that holds two copies warns, when the pipeline is built, that a
    global shuffle over all six files (or windows of 2 and the next) will copy files in and out, with the size
    that would hold them; room for two windows of one file does not warn. The batches are right either way."""
    copy = {f: CacheSpec.copy_bytes(len(b"".join(records(f))) + 16 * SIZES[f], SIZES[f]) for f in range(len(SIZES))}
    two = sorted(copy.values())[-1] + sorted(copy.values())[-2]
    cache = {"dir": str(tmp_path / "cache"), "max_bytes": two}
    with pytest.warns(RuntimeWarning) as warned:
        fn = batchloaders.build_input_fn(config(data["ram-plain"], cache))
    assert f"cannot hold all of the dataset's files" in str(warned[0].message)
    assert f"up to {sum(copy.values()):,} bytes" in str(warned[0].message)
    with pytest.warns(RuntimeWarning, match=r"cannot hold 4 files \(a window of shuffle_window_files 2"):
        batchloaders.build_input_fn(config(data["ram-plain"], cache, shuffle_window_files=2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        batchloaders.build_input_fn(config(data["ram-plain"], cache, shuffle_window_files=1))
    got = [np.asarray(b["id"]).tolist() for b in fn()]
    assert sorted(sum(got, [])) == sorted(IDS * 2)
