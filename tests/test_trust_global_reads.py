"""The global shuffle's reader under stress: a program's exit, a file cut at full speed, damaged payloads.

Record r of file f holds id = 1000 * f + r and a note of r % 50 + 1 bytes (records differ in size).
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from batchloaders import build_input_fn, load_config
from batchloaders.cli.main import main
from batchloaders.config.manifest import load_manifest
from batchloaders.errors import DataError
from batchloaders.read.record_index import load_index
from conftest import example, feature, loader_config, write_manifest, write_records

HERE = os.path.dirname(os.path.abspath(__file__))
FILES, RECORDS = 4, 500
# Children per way of ending a program: 3 in the suite (each costs its build and its exit, about 1.7 s of CPU);
# `make fuzz` (FUZZ_SCALE=8) runs 24 of each.
EXIT_RUNS = max(1, round(3 * float(os.environ.get("FUZZ_SCALE", "1"))))


def record(f: int, r: int) -> bytes:
    return example(id=("int", [1000 * f + r]), note=("string", [b"n" * (r % 50 + 1)]))


def dataset(d: str) -> str:
    write_manifest(d, [feature("id", "int64", [], "int"), feature("note", "string", [], "string")])
    for f in range(FILES):
        write_records(os.path.join(d, f"part-{f}.tfrecords"), [record(f, r) for r in range(RECORDS)])
    with pytest.raises(SystemExit) as done:
        main(["index", d])
    assert done.value.code == 0
    return d


def config(d: str, **args) -> dict:
    # tf.data's own prefetch and read buffer, as `init` writes them: the reads run ahead of the program.
    base = dict(shuffle=True, shuffle_scope="global", seed=5, epochs=2, target_batch_size=64, num_prefetch=-1,
                num_read_buffer_bytes=262144)
    base.update(args)
    return loader_config(d, [("id", "id")], inputs=["id"], **base)


def environment() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=HERE)
    return env


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    return dataset(str(tmp_path_factory.mktemp("global") / "d"))


def test_programs_that_took_a_batch_always_exit(data, tmp_path):
    """Each way of ending a program, EXIT_RUNS children each: none hangs at exit and none aborts (exit_runner.py)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config(data)))
    plan = [f"{name}:{EXIT_RUNS}" for name in ("plain", "raises", "resumable", "numpy_iterator")]
    done = subprocess.run([sys.executable, os.path.join(HERE, "exit_runner.py"), str(path), *plan],
                          capture_output=True, text=True, env=environment(), timeout=3000)
    assert done.returncode == 0, done.stderr[-3000:]
    ends = collections.Counter((r["scenario"], r["end"]) for r in map(json.loads, done.stdout.splitlines()))
    assert ends == {("plain", "exit 0"): EXIT_RUNS, ("raises", "exit 1"): EXIT_RUNS,
                    ("resumable", "exit 0"): EXIT_RUNS, ("numpy_iterator", "exit 0"): EXIT_RUNS}


CUT_WHILE_READING = """
import os, sys, threading
import batchloaders
from batchloaders.errors import DataError

config, path = sys.argv[1], sys.argv[2]
batches = iter(batchloaders.build_input_fn(config)())
next(batches)
cut = threading.Thread(target=os.truncate, args=(path, os.path.getsize(path) // 2))
cut.start()  # while the reads run ahead at full speed
try:
    for _ in batches:
        pass
except DataError as error:
    print(error)
    sys.exit(3)
"""


def test_a_file_cut_while_the_reads_run_at_full_speed_is_a_data_error(tmp_path):
    """The process ends with a DataError naming the file, never a signal (reads are positional, not a memory map)."""
    d = dataset(str(tmp_path / "d"))
    path = os.path.join(d, "part-2.tfrecords")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config(d, epochs=None)))  # endless: part-2 is read again after the cut
    done = subprocess.run([sys.executable, "-c", CUT_WHILE_READING, str(cfg), path], capture_output=True,
                          text=True, env=environment(), timeout=600)
    assert done.returncode == 3, (done.returncode, done.stderr[-3000:])
    assert done.stdout.startswith(f"{path}: record "), done.stdout
    assert f"the data file is {os.path.getsize(path):,} bytes, shorter than the" in done.stdout, done.stdout


def _flipped(path: str, at: int) -> None:
    blob = bytearray(open(path, "rb").read())
    blob[at] ^= 0x01
    open(path, "wb").write(bytes(blob))


# (what is damaged, where in record 7's frame: bytes after the frame's start, given the payload's length;
#  what the error says after 'record 7: at byte N')
DAMAGE = [
    ("a payload byte", lambda n: 12 + n // 2, "its payload's checksum does not match its {n:,} bytes: the record is "
                                               "damaged (run `batchloaders verify` to check every file against the "
                                               "manifest)"),
    ("the payload's checksum", lambda n: 12 + n + 1, "its payload's checksum does not match its {n:,} bytes"),
    ("the length's checksum", lambda n: 9, "where its index says it begins, there is no record frame of {f:,} bytes"),
]


@pytest.mark.parametrize("what,where,said", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_a_damaged_record_read_by_offset_is_a_data_error_naming_it(tmp_path, what, where, said):
    """One flipped bit, the file's size and framing otherwise intact: the global read names file and record."""
    d = dataset(str(tmp_path / "d"))
    path = os.path.join(d, "part-1.tfrecords")
    index = load_index(path, load_manifest(os.path.join(d, "__manifest__.json")))
    offset, n = int(index.offsets[7]), int(index.lengths[7])
    _flipped(path, offset + where(n))
    expected = f"{path}: record 7: at byte {offset:,}, " + said.format(n=n, f=n + 16)
    with pytest.raises(DataError) as raised:
        for _ in build_input_fn(config(d, epochs=1))():
            pass
    assert expected in str(raised.value), str(raised.value)


def test_every_record_read_by_offset_is_the_record_written(data):
    """Checked reads give back each record once per epoch, its payload as written."""
    ids = [int(i) for b in build_input_fn(config(data, epochs=1))() for i in np.asarray(b["id"])]
    assert sorted(ids) == [1000 * f + r for f in range(FILES) for r in range(RECORDS)]
    assert ids != sorted(ids)


def test_the_reader_closes_its_files(data):
    from batchloaders.read.offset_reader import OffsetReader

    reader = OffsetReader(load_config(config(data)))
    joined, lengths, problem = reader.frames(np.array([3, RECORDS + 4]))
    assert problem == b"" and len(reader._fds) == 2
    reader.close()
    assert reader._fds == {}
    assert reader.frames(np.array([3]))[2] == b""  # opened again on use


def test_a_data_file_removed_after_the_build_is_a_data_error_naming_it(tmp_path):
    d = dataset(str(tmp_path / "d"))
    batches = build_input_fn(config(d, epochs=1, num_prefetch=0))()  # built: the files are listed and counted
    path = os.path.join(d, "part-3.tfrecords")
    os.remove(path)
    with pytest.raises(DataError, match=rf"{path}: record \d+: the file cannot be read \(No such file or directory\)"):
        for _ in batches:
            pass


def test_a_dataset_of_more_files_than_the_reader_keeps_open(tmp_path):
    """Past ``kept_open()`` files, each call opens what it reads and closes it: every record is read once, and
    the reader never holds more descriptors than its bound."""
    from batchloaders.read import offset_reader

    d = str(tmp_path / "many")
    write_manifest(d, [feature("id", "int64", [], "int"), feature("note", "string", [], "string")])
    for f in range(12):
        write_records(os.path.join(d, f"part-{f:02d}.tfrecords"), [record(f, r) for r in range(5)])
    with pytest.raises(SystemExit):
        main(["index", d])
    kept, offset_reader.KEPT_OPEN = offset_reader.KEPT_OPEN, 3
    try:
        reader = offset_reader.OffsetReader(load_config(config(d)))
        joined, lengths, problem = reader.frames(np.arange(60)[::-1])
        assert problem == b"" and len(reader._fds) == 3
        ids = [int(i) for b in build_input_fn(config(d, epochs=1, target_batch_size=7))() for i in np.asarray(b["id"])]
    finally:
        offset_reader.KEPT_OPEN = kept
    assert sorted(ids) == [1000 * f + r for f in range(12) for r in range(5)]


EXITING_HANDLER = """
import atexit, sys
import batchloaders

fn = batchloaders.build_input_fn(sys.argv[1])
next(iter(fn()))

def at_exit():
    print("read at exit:", sum(int(b["id"].shape[0]) for b in fn()), flush=True)
atexit.register(at_exit)
"""


def test_a_program_may_read_in_its_own_exit_handler(data, tmp_path):
    """A handler registered after importing batchloaders runs before the reader's gate closes: it reads a whole
    epoch, and the program still exits."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config(data, epochs=1)))
    done = subprocess.run([sys.executable, "-c", EXITING_HANDLER, str(path)], capture_output=True, text=True,
                          env=environment(), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == f"read at exit: {FILES * RECORDS}\n"
