"""``batchloaders reshard SRC DEST --shards N``: every record exactly once, balanced, deterministic, verified,
ready for ``shuffle_scope: global``; damaged input and killed runs leave no manifest.

The source: GZIP files of 3, 17, 0, 9 and 1 records (30 in all); record r of file f holds id 100 * f + r and
a note of r % 4 bytes, so records differ in size.
"""
from __future__ import annotations

import collections
import io
import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import batchloaders
from batchloaders.cli import verify
from batchloaders.cli.main import main
from batchloaders.errors import ConfigError, DataError, ManifestError
from batchloaders.prepare.reshard import Options, plan, reshard, shard_name
from conftest import example, feature, flip_byte, loader_config, write_manifest, write_records

SIZES = (3, 17, 0, 9, 1)
IDS = [100 * f + r for f, n in enumerate(SIZES) for r in range(n)]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def record(f: int, r: int) -> bytes:
    return example(id=("int", [100 * f + r]), note=("string", [b"n" * (r % 4)]))


def source(root: str, compression="gzip") -> str:
    """The GZIP dataset above, with its manifest written by `batchloaders manifest`."""
    write_manifest(root, [feature("id", "int64", [], "int"), feature("note", "string", [], "string")],
                   compression=compression)
    for f, n in enumerate(SIZES):
        write_records(os.path.join(root, f"in-{f}.tfrecords"), [record(f, r) for r in range(n)], compression)
    assert batchloaders.write_manifest(root)
    return root


def records_of(path: str, compression=None) -> list[bytes]:
    return [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type=compression or "")]


def contents(root: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(root)):
        with open(os.path.join(root, name), "rb") as f:
            out[name] = f.read()
    return out


def shards_of(root: str, n: int) -> list[list[bytes]]:
    return [records_of(os.path.join(root, shard_name(k, n))) for k in range(n)]


@pytest.mark.parametrize("counts, shards, expected", [
    ((4,), 2, [[(0, 0, 2, False)], [(0, 2, 4, True)]]),
    ((1, 3), 2, [[(0, 0, 1, True), (1, 0, 1, False)], [(1, 1, 3, True)]]),
    ((2, 0, 2), 2, [[(0, 0, 2, True)], [(1, 0, 0, True), (2, 0, 2, True)]]),  # position 2 is shard 1's
    ((2,), 3, [[], [(0, 0, 1, False)], [(0, 1, 2, True)]]),  # fewer records than shards: some are empty
    ((0, 0), 2, [[], [(0, 0, 0, True), (1, 0, 0, True)]]),
    ((5, 5), 1, [[(0, 0, 5, True), (1, 0, 5, True)]]),
])
def test_the_plan_gives_shard_k_the_positions_k_t_over_n_onward(counts, shards, expected):
    assert plan(counts, shards) == expected


@pytest.mark.parametrize("counts", [(3, 17, 0, 9, 1), (100,), (1, 1, 1), (0, 7, 0, 0, 12)])
@pytest.mark.parametrize("shards", [1, 3, 7, 40])
def test_every_position_once_in_order_and_sizes_within_one(counts, shards):
    starts = np.cumsum((0,) + counts)
    positions = [starts[f] + r for ranges in plan(counts, shards) for f, first, stop, _ in ranges
                 for r in range(first, stop)]
    assert positions == list(range(sum(counts)))
    sizes = [sum(stop - first for _, first, stop, _ in ranges) for ranges in plan(counts, shards)]
    assert max(sizes) - min(sizes) <= 1
    assert sorted(f for ranges in plan(counts, shards) for f, _, _, last in ranges if last) == list(range(len(counts)))


@pytest.mark.parametrize("n", [3, 7])
def test_a_gzip_dataset_of_unequal_files_resharded(tmp_path, n):
    src = source(str(tmp_path / "src"))
    dest = str(tmp_path / "dest")
    written = reshard(src, dest, Options(n))
    assert os.path.basename(written[-1]) == "__manifest__.json"
    shards = shards_of(dest, n)
    originals = [record(f, r) for f, size in enumerate(SIZES) for r in range(size)]
    assert collections.Counter(r for s in shards for r in s) == collections.Counter(originals)
    assert [r for s in shards for r in s] == originals  # contiguous ranges keep SRC's order
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    first = contents(dest)
    again = str(tmp_path / "again")
    reshard(src, again, Options(n))
    assert contents(again) == first  # byte for byte, the manifest and indexes too
    out = io.StringIO()
    assert verify.run(dest, out, io.StringIO()) == 0, out.getvalue()
    manifest = json.loads(first["__manifest__.json"])
    assert manifest["compression"] is None and [f["name"] for f in manifest["features"]] == ["id", "note"]
    assert all(entry["index"]["name"] == entry["name"] + ".index" for entry in manifest["files"])
    cfg = loader_config(dest, [("id", "id")], inputs=["id"], shuffle=True, shuffle_scope="global", seed=3,
                        target_batch_size=5)
    ids = [i for batch in build_ids(cfg) for i in batch]
    assert sorted(ids) == sorted(IDS) and ids != IDS


def build_ids(cfg: dict) -> list[list[int]]:
    return [np.asarray(batch["id"]).tolist() for batch in batchloaders.build_input_fn(cfg)()]


def test_across_runners_and_gzip_output(tmp_path):
    pytest.importorskip("apache_beam")
    src = source(str(tmp_path / "src"))
    here, there = str(tmp_path / "here"), str(tmp_path / "there")
    reshard(src, here, Options(3))
    batchloaders.reshard(src, there, 3, runner="DirectRunner")
    assert contents(there) == contents(here)
    zipped = str(tmp_path / "zipped")
    main_exit(["reshard", src, zipped, "--shards", "2", "--compression", "gzip", "--runner", "DirectRunner"])
    manifest = json.loads(contents(zipped)["__manifest__.json"])
    assert manifest["compression"] == "gzip" and not any("index" in e for e in manifest["files"])
    assert sorted(contents(zipped)) == ["__manifest__.json", shard_name(0, 2), shard_name(1, 2)]
    assert [r for k in range(2) for r in records_of(os.path.join(zipped, shard_name(k, 2)), "GZIP")] == \
        [r for k in range(3) for r in records_of(os.path.join(here, shard_name(k, 3)))]


def main_exit(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as done:
        main(argv)
    return done.value.code


def test_a_config_as_source_and_its_files_order(tmp_path, capsys):
    src = source(str(tmp_path / "src"), compression=None)
    cfg_path = str(tmp_path / "c.json")
    with open(cfg_path, "w") as f:
        json.dump(loader_config(src, [("id", "id")], inputs=["id"]), f)
    dest = str(tmp_path / "dest")
    assert main_exit(["reshard", cfg_path, dest, "--shards", "4", "--no-index"]) == 0
    out = capsys.readouterr().out
    assert "wrote 4 shards in" in out and ": 30 records, " in out and "indexed" not in out
    assert sorted(contents(dest)) == ["__manifest__.json"] + [shard_name(k, 4) for k in range(4)]
    assert [r for s in shards_of(dest, 4) for r in s] == [record(f, r) for f, n in enumerate(SIZES) for r in range(n)]


def test_a_damaged_source_file_is_named_and_nothing_is_left(tmp_path):
    src = source(str(tmp_path / "src"), compression=None)
    path = os.path.join(src, "in-3.tfrecords")
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(flip_byte(data, len(data) - 1))  # the last record's checksum: shards before it are written first
    dest = str(tmp_path / "dest")
    with pytest.raises(DataError, match=r"in-3\.tfrecords: record 8: at byte [\d,]+: cannot be read") as raised:
        reshard(src, dest, Options(7))
    assert len(raised.value.problems) == 1 and raised.value.problems[0].file.endswith("in-3.tfrecords")
    assert not os.path.exists(dest)  # the DEST this run created is removed again


def test_a_source_file_that_changed_since_its_manifest(tmp_path):
    src = source(str(tmp_path / "src"), compression=None)
    write_records(os.path.join(src, "in-2.tfrecords"), [record(2, 0)])  # listed with 0 records
    with pytest.raises(DataError, match=r"in-2\.tfrecords: file: it holds more than the 0 records"):
        reshard(src, str(tmp_path / "dest"), Options(2))
    write_records(os.path.join(src, "in-2.tfrecords"), [])
    write_records(os.path.join(src, "in-4.tfrecords"),  # the same count and size, other bytes
                  [example(id=("int", [401]), note=("string", [b""]))])
    with pytest.raises(DataError, match=r"in-4\.tfrecords: file: its SHA-256 is"):
        reshard(src, str(tmp_path / "dest"), Options(2))


def test_a_killed_reshard_leaves_no_manifest_and_the_next_run_completes(tmp_path):
    src = source(str(tmp_path / "src"))
    dest = str(tmp_path / "dest")
    code = textwrap.dedent(f"""
        import os, signal
        from batchloaders.prepare import reshard as module
        write = module.write_shard
        done = []
        def dying(task):
            if len(done) == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            done.append(write(task))
            return done[-1]
        module.write_shard = dying
        module.reshard({src!r}, {dest!r}, module.Options(5))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, PYTHONPATH=REPO))
    assert result.returncode == -signal.SIGKILL, result.stderr
    left = os.listdir(dest)
    assert left and "__manifest__.json" not in left and not any(name.startswith("part-") for name in left)
    reshard(src, dest, Options(5))  # its temporary files are not in the way, and are gone after
    assert sorted(contents(dest)) == sorted(["__manifest__.json"] + [shard_name(k, 5) for k in range(5)]
                                            + [shard_name(k, 5) + ".index" for k in range(5)])


def test_dest_must_be_empty_unless_overwrite_and_apart_from_src(tmp_path):
    src = source(str(tmp_path / "src"), compression=None)
    dest = str(tmp_path / "dest")
    reshard(src, dest, Options(2))
    with pytest.raises(ConfigError, match=r"found 5 file\(s\) or directories in DEST .*--overwrite"):
        reshard(src, dest, Options(3))
    reshard(src, dest, Options(3, overwrite=True))
    assert sorted(name for name in contents(dest) if name.startswith("part-")) == sorted(
        [shard_name(k, 3) for k in range(3)] + [shard_name(k, 3) + ".index" for k in range(3)])
    with pytest.raises(ConfigError, match="expected DEST apart from SRC"):
        reshard(src, str(tmp_path), Options(2, overwrite=True))
    assert os.path.exists(os.path.join(src, "__manifest__.json"))


@pytest.mark.parametrize("options, message", [
    (dict(shards=0), "expected a whole number of output files, 1 or more"),
    (dict(shards=2, compression="zlib"), "expected none"),
])
def test_options_that_cannot_be_used(options, message):
    with pytest.raises(ConfigError, match=message):
        Options(**options)


def test_a_source_without_files_listed(tmp_path):
    src = str(tmp_path / "src")
    write_manifest(src, [feature("id", "int64", [], "int")])
    with pytest.raises(ManifestError, match=r"\$\.files: found no files.*batchloaders manifest"):
        reshard(src, str(tmp_path / "dest"), Options(2))


def test_any_file_system_tensorflow_reads(tmp_path):
    src, dest = "ram://reshard/src", "ram://reshard/dest"
    local = source(str(tmp_path / "src"))
    for name, data in contents(local).items():
        with tf.io.gfile.GFile(f"{src}/{name}", "wb") as f:
            f.write(data)
    written = reshard(src, dest, Options(3))
    assert written[-1] == dest + "/__manifest__.json"
    here = str(tmp_path / "here")
    reshard(local, here, Options(3))
    for name, data in contents(here).items():
        with tf.io.gfile.GFile(f"{dest}/{name}", "rb") as f:
            assert f.read() == data, name
