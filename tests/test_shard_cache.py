"""The shard cache (read/shard_cache.py): data files copied once into a local directory, decompressed and indexed,
then read at their offsets; checked against the manifest and on first use; bounded by max_bytes, evicting the
least recently needed first; safe when two processes share the directory and when a copy is killed.

Record r of file f holds id = 100*f + r, so every read says where its bytes came from.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
import warnings
import zlib

import pytest
import tensorflow as tf

from conftest import example
from batchloaders.core.model import CacheSpec, DataFile, Manifest, file_key
from batchloaders.errors import ConfigError, DataError
from batchloaders.read.record_index import scan_offsets
from batchloaders.read.shard_cache import CachedFiles

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TF_OPTIONS = {None: "", "gzip": "GZIP", "zlib": "ZLIB"}


def records_of(f: int, n: int, pad: int = 200) -> list[bytes]:
    return [example(id=("int", [100 * f + r]), pad=("bytes", [bytes([65 + (f + r) % 26]) * (pad + 7 * r)]))
            for r in range(n)]


def write(path: str, records: list[bytes], compression=None) -> str:
    if tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)  # TensorFlow's ram:// file system appends to a file it opens for writing
    with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type=TF_OPTIONS[compression])) as w:
        for r in records:
            w.write(r)
    return path


def read_bytes(path: str) -> bytes:
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def base_dir(tmp_path, where: str) -> str:
    if where == "ram":
        return f"ram://{uuid.uuid4().hex}"
    os.makedirs(tmp_path / "src", exist_ok=True)
    return str(tmp_path / "src")


def dataset(tmp_path, where="local", compression=None, files=2, n=5, pad=200):
    """(paths, manifest, records per file, uncompressed twin paths): data files and their manifest."""
    base, twins, paths, recs = base_dir(tmp_path, where), [], [], []
    os.makedirs(tmp_path / "twin", exist_ok=True)
    for f in range(files):
        recs.append(records_of(f, n, pad))
        paths.append(write(f"{base}/part-{f}.tfrecords", recs[-1], compression))
        twins.append(write(str(tmp_path / "twin" / f"part-{f}.tfrecords"), recs[-1]))
    return paths, manifest(paths, compression, [len(r) for r in recs]), recs, twins


def manifest(paths, compression, counts, hashes=True) -> Manifest:
    files = {}
    for path, n in zip(paths, counts):
        blob = read_bytes(path)
        files[file_key(path)] = DataFile(os.path.basename(path), n, len(blob) if hashes else None,
                                         hashlib.sha256(blob).hexdigest() if hashes else None)
    return Manifest("<manifest>", compression, False, {}, files)


def records_read(cache: CachedFiles, f: int) -> list[bytes]:
    """Every record of file f, read by frame at the offsets of the cache's index."""
    ix = cache.index(f)
    frames = cache.read(f, ix.offsets.tolist(), (ix.lengths + 16).tolist())
    return [frame[12:-4] for frame in frames]


def cache_bytes(d) -> int:
    """Bytes all files in the cache directory take (temporaries included)."""
    total = 0
    for n in os.listdir(d):
        try:
            total += os.stat(os.path.join(d, n)).st_size
        except FileNotFoundError:
            pass
    return total


def cached_files(d, paths) -> set[int]:
    """The data files (numbers) with a complete entry in the cache directory."""
    metas = {n for n in os.listdir(d) if n.endswith(".meta") and not n.startswith(".tmp-")}
    return {f for f, p in enumerate(paths) if any(m.endswith(f"-{os.path.basename(p)}.meta") for m in metas)}


@pytest.mark.parametrize("where", ["local", "ram"])
@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_copy_gives_the_records_and_index_of_the_uncompressed_twin(tmp_path, where, compression):
    paths, man, recs, twins = dataset(tmp_path, where, compression)
    with CachedFiles(paths, man, CacheSpec(str(tmp_path / "cache"), 10**7)) as cache:
        for f, twin in enumerate(twins):
            want = scan_offsets(twin)
            got = cache.index(f)
            assert got.offsets.tolist() == want.offsets.tolist() and got.data_size == want.data_size
            assert cache.size(f) == os.path.getsize(twin)
            assert records_read(cache, f) == recs[f]
            assert cache.read(f, [0, want.data_size - 4], [len(read_bytes(twin)), 100]) == [
                read_bytes(twin), read_bytes(twin)[-4:]]  # a part is shorter where the copy ends


@pytest.mark.parametrize("compress", [gzip.compress, lambda b: zlib.compress(b)], ids=["gzip", "zlib"])
def test_streams_one_after_another_are_read_in_turn(tmp_path, compress):
    recs = records_of(3, 6)
    twin = write(str(tmp_path / "twin.tfrecords"), recs)
    blob, cut = read_bytes(twin), scan_offsets(twin).offsets[4]
    path = str(tmp_path / "members.tfrecords")
    with open(path, "wb") as f:
        f.write(compress(blob[:cut]) + compress(blob[cut:]))
    kind = "gzip" if compress is gzip.compress else "zlib"
    with CachedFiles([path], manifest([path], kind, [6]), CacheSpec(str(tmp_path / "cache"), 10**7)) as cache:
        assert records_read(cache, 0) == recs


def test_a_second_cache_on_the_directory_reads_no_source(tmp_path):
    paths, man, recs, _ = dataset(tmp_path, "ram", "gzip", files=3)
    spec = CacheSpec(str(tmp_path / "cache"), 10**7)
    with CachedFiles(paths, man, spec) as cache:
        assert [records_read(cache, f) for f in range(3)] == recs
    for p in paths:
        tf.io.gfile.remove(p)
    with CachedFiles(paths, man, spec) as cache:
        assert [records_read(cache, f) for f in range(3)] == recs


def entry_bytes(spec_dir, paths) -> int:
    """The most bytes one entry (copy, index, meta) takes in the cache."""
    sizes = {}
    for n in os.listdir(spec_dir):
        if not n.startswith(".tmp-") and n != "cache.lock":
            key = n.rsplit(".", 1)[0]
            sizes[key] = sizes.get(key, 0) + os.path.getsize(os.path.join(spec_dir, n))
    return max(sizes.values())


def test_reads_evict_the_least_recently_needed(tmp_path):
    paths, man, recs, _ = dataset(tmp_path, "local", None, files=6, n=8, pad=600)
    d = str(tmp_path / "cache")
    with CachedFiles(paths[:1], manifest(paths[:1], None, [8]), CacheSpec(d + "-probe", 10**7)) as probe:
        probe.index(0)
    one = entry_bytes(d + "-probe", paths)
    limit = 2 * one + one // 2  # room for two files
    with CachedFiles(paths, man, CacheSpec(d, limit)) as cache:
        for f in range(6):
            assert records_read(cache, f) == recs[f]
            assert cache_bytes(d) <= limit and cached_files(d, paths) == {f - 1, f} - {-1}
        for f, left in [(4, {4, 5}), (2, {4, 2}), (5, {2, 5}), (2, {2, 5}), (0, {2, 0})]:
            assert records_read(cache, f) == recs[f]
            assert cached_files(d, paths) == left, f


class Poll:
    """Samples the bytes in the cache directory from a thread until stopped."""

    def __init__(self, d):
        self.d, self.most, self.stop = d, 0, threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            self.most = max(self.most, cache_bytes(self.d))
            time.sleep(0.0005)

    def end(self) -> int:
        self.stop.set()
        self.thread.join()
        return self.most


def settle(d, paths, want: set[int]) -> set[int]:
    deadline = time.time() + 30
    while cached_files(d, paths) != want and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # nothing more arrives
    return cached_files(d, paths)


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_prefetch_stays_within_max_bytes_and_keeps_what_is_needed_sooner(tmp_path, compression):
    paths, man, recs, _ = dataset(tmp_path, "local", compression, files=6, n=200, pad=3000)
    d = str(tmp_path / "cache")
    with CachedFiles(paths[:1], manifest(paths[:1], compression, [200]), CacheSpec(d + "-probe", 10**9)) as probe:
        probe.index(0)
    one = entry_bytes(d + "-probe", paths)
    limit = 2 * one + one // 2
    with CachedFiles(paths, man, CacheSpec(d, limit)) as cache:
        poll = Poll(d)
        cache.prefetch(range(6))
        assert settle(d, paths, {0, 1}) == {0, 1}  # file 2 would evict files needed before it
        assert records_read(cache, 0) == recs[0] and records_read(cache, 1) == recs[1]
        cache.prefetch([2, 3, 4, 5])  # 0 and 1 are no longer needed
        assert settle(d, paths, {2, 3}) == {2, 3}
        assert [records_read(cache, f) for f in (2, 3)] == recs[2:4]
        assert poll.end() <= limit + one
    assert cache_bytes(d) <= limit


KILLED_COPY = """
import sys
from batchloaders.core.model import CacheSpec, DataFile, Manifest, file_key
from batchloaders.read.shard_cache import CachedFiles
path, d = sys.argv[1], sys.argv[2]
man = Manifest("<manifest>", "gzip", False, {}, {file_key(path): DataFile("big", int(sys.argv[3]))})
CachedFiles([path], man, CacheSpec(d, 10**10)).index(0)
print("copied")
"""


def test_a_killed_copy_is_never_used(tmp_path):
    n = 20000
    recs = [example(id=("int", [r]), pad=("bytes", [os.urandom(800)])) for r in range(n)]
    path = write(str(tmp_path / "big.tfrecords"), recs, "gzip")
    d = str(tmp_path / "cache")
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.Popen([sys.executable, "-c", KILLED_COPY, path, d, str(n)], env=env, stdout=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline:
        temps = [t for t in (os.listdir(d) if os.path.isdir(d) else []) if t.startswith(".tmp-")]
        if temps and os.path.getsize(os.path.join(d, temps[0])) > 1 << 20:
            break
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert [t for t in os.listdir(d) if t.startswith(".tmp-")], "the copy ended before it was killed"
    assert not [t for t in os.listdir(d) if t.endswith(".meta")]
    # a part of an entry whose commit was killed is not used either
    temp = next(t for t in os.listdir(d) if t.startswith(".tmp-") and t.endswith(".data"))
    with open(os.path.join(d, temp.split("-", 3)[-1]), "wb") as f:
        f.write(b"junk")
    with CachedFiles([path], manifest([path], "gzip", [n]), CacheSpec(d, 10**10)) as cache:
        assert records_read(cache, 0) == recs
    assert not [t for t in os.listdir(d) if t.startswith(".tmp-")]


@pytest.mark.parametrize("part,at", [(".data", 100), (".data", -3), (".index", 30)])
def test_a_damaged_copy_is_copied_again(tmp_path, part, at):
    paths, man, recs, _ = dataset(tmp_path, "ram", "gzip")
    spec = CacheSpec(str(tmp_path / "cache"), 10**7)
    with CachedFiles(paths, man, spec) as cache:
        records_read(cache, 1)
    target = next(os.path.join(spec.dir, n) for n in os.listdir(spec.dir) if n.endswith(part))
    blob = bytearray(open(target, "rb").read())
    blob[at] ^= 0x01
    open(target, "wb").write(bytes(blob))
    with CachedFiles(paths, man, spec) as cache:
        with pytest.warns(RuntimeWarning, match="damaged.*copying it again"):
            assert records_read(cache, 1) == recs[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with CachedFiles(paths, man, spec) as cache:
            assert records_read(cache, 1) == recs[1]


def changed_size(path, recs, compression):
    write(path, recs + recs[:1], compression)


def changed_bytes(path, recs, compression):
    write(path, [r.replace(b"A", b"Z") for r in recs], compression)  # same sizes, other bytes


@pytest.mark.parametrize("change,compression,hashes,found", [
    (changed_size, "gzip", True, "as stored, but the manifest records"),
    (changed_bytes, None, True, "SHA-256 is .* but the manifest records"),
    (changed_size, "gzip", False, "holds 6 records, but the manifest lists 5"),
])
def test_a_source_that_differs_from_the_manifest_is_a_data_error(tmp_path, change, compression, hashes, found):
    paths, _, recs, _ = dataset(tmp_path, "ram", compression)
    man = manifest(paths, compression, [5, 5], hashes)
    before = read_bytes(paths[0])
    change(paths[0], recs[0], compression)
    assert (len(read_bytes(paths[0])) == len(before)) == (change is changed_bytes) and read_bytes(paths[0]) != before
    d = str(tmp_path / "cache")
    with CachedFiles(paths, man, CacheSpec(d, 10**7)) as cache:
        with pytest.raises(DataError, match=found) as caught:
            cache.read(0, [0], [10])
        assert caught.value.problems[0].file == paths[0]
        assert records_read(cache, 1) == recs[1]
    assert cached_files(d, paths) == {1} and not [n for n in os.listdir(d) if n.startswith(".tmp-")]


TWO_PROCESSES = """
import json, sys, warnings
warnings.simplefilter("error")
from batchloaders.core.model import CacheSpec, DataFile, Manifest, file_key
from batchloaders.read.shard_cache import CachedFiles
job = json.load(open(sys.argv[1]))
man = Manifest("<manifest>", "gzip", False, {}, {file_key(p): DataFile(p, n, s, h) for p, n, s, h in job["files"]})
paths = [f[0] for f in job["files"]]
with CachedFiles(paths, man, CacheSpec(job["dir"], job["max_bytes"])) as cache:
    for rounds in range(3):
        for f in (range(len(paths)) if sys.argv[2] == "up" else reversed(range(len(paths)))):
            ix = cache.index(f)
            frames = cache.read(f, ix.offsets.tolist(), (ix.lengths + 16).tolist())
            assert [x[12:-4].hex() for x in frames] == job["records"][f], f
print("ok")
"""


def test_two_processes_share_one_cache(tmp_path):
    paths, man, recs, _ = dataset(tmp_path, "local", "gzip", files=6, n=100, pad=1000)
    d = str(tmp_path / "cache")
    with CachedFiles(paths[:1], man, CacheSpec(d + "-probe", 10**9)) as probe:
        probe.index(0)
    limit = 3 * entry_bytes(d + "-probe", paths) + 1000  # room for half the files
    job = {"dir": d, "max_bytes": limit, "records": [[r.hex() for r in rs] for rs in recs],
           "files": [[p, e.num_records, e.size_bytes, e.sha256] for p, e in
                     ((p, man.entry(p)) for p in paths)]}
    (tmp_path / "job.json").write_text(json.dumps(job))
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    procs = [subprocess.Popen([sys.executable, "-c", TWO_PROCESSES, str(tmp_path / "job.json"), way], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for way in ("up", "down")]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [(p.returncode, o[0].strip()) for p, o in zip(procs, outs)] == [(0, b"ok")] * 2, outs
    names = os.listdir(d)
    assert not [n for n in names if n.startswith(".tmp-")]
    metas = {n[:-5] for n in names if n.endswith(".meta")}
    assert {n.rsplit(".", 1)[0] for n in names if n != "cache.lock"} == metas
    assert cache_bytes(d) <= limit and 1 <= len(metas) <= 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no entry is damaged
        with CachedFiles(paths, man, CacheSpec(d, limit)) as cache:
            for f in cached_files(d, paths):
                assert records_read(cache, f) == recs[f]


def deleted_copies_open(d) -> int:
    """Descriptors of this process open on a removed file of the cache directory."""
    links = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return sum(link.startswith(d) and link.endswith("(deleted)") for link in links)


def test_a_copy_another_process_evicts_is_read_again_and_let_go(tmp_path):
    paths, man, recs, _ = dataset(tmp_path, "local", None, files=2)
    d = str(tmp_path / "cache")
    with CachedFiles(paths, man, CacheSpec(d, 10**7)) as first:
        assert records_read(first, 0) == recs[0]
        with CachedFiles(paths, man, CacheSpec(d, os.path.getsize(paths[1]) + 2000)) as second:
            assert records_read(second, 1) == recs[1]  # room for one: file 0 is evicted
        assert cached_files(d, paths) == {1}
        assert deleted_copies_open(d) == 1  # the first cache still holds file 0's removed copy
        assert records_read(first, 0) == recs[0]
        assert deleted_copies_open(d) == 0


def test_a_cache_dir_that_cannot_be_made_is_a_config_error(tmp_path):
    paths, man, _, _ = dataset(tmp_path, "local", None, files=1)
    (tmp_path / "plain").write_text("a file")
    d = str(tmp_path / "plain" / "cache")
    with pytest.raises(ConfigError, match="cache directory .*plain/cache cannot be created or written") as caught:
        CachedFiles(paths, man, CacheSpec(d, 10**7), config_file="loader.json")
    assert (caught.value.problems[0].file, caught.value.problems[0].path) == (
        "loader.json", "$.args.dataset.args.cache.dir")


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_a_file_larger_than_max_bytes_is_a_config_error(tmp_path, compression):
    paths, man, _, twins = dataset(tmp_path, "local", compression, files=1)
    d = str(tmp_path / "cache")
    with CachedFiles(paths, man, CacheSpec(d, 1000)) as cache:
        with pytest.raises(ConfigError, match=f"data file {paths[0]} takes .* bytes in the cache, more than "
                                              r"max_bytes \(1,000\)") as caught:
            cache.index(0)
    assert caught.value.problems[0].path == "$.args.dataset.args.cache.max_bytes"
    assert os.listdir(d) == ["cache.lock"]


def test_a_closed_cache_still_reads_and_prefetches_again(tmp_path):
    """close() stops prefetching and closes the copies, but the instance may be shared by several pipelines of a
    process: a read after it copies what it needs (it is not cancelled), and a prefetch after it runs again."""
    paths, man, recs, _ = dataset(tmp_path, "ram", "gzip", files=3, n=6)
    d = str(tmp_path / "cache")
    cache = CachedFiles(paths, man, CacheSpec(d, 10**7))
    assert records_read(cache, 0) == recs[0]
    cache.close()
    assert records_read(cache, 1) == recs[1]  # copied after the close
    cache.prefetch([2])
    deadline = time.monotonic() + 20
    while 2 not in cached_files(d, paths) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cached_files(d, paths) == {0, 1, 2}
    assert records_read(cache, 2) == recs[2]
    cache.close()
