"""``batchloaders reshard`` where it can go wrong: links in DEST, failing runs over a good dataset, two runs in
one DEST, write failures, bad Beam options, a run interrupted on a runner, results that are not JSON, and the
messages a user reads.

The source is test_reshard's: GZIP files of 3, 17, 0, 9 and 1 records with a manifest.
"""
from __future__ import annotations

import json
import os
import pickle

import pytest
import tensorflow as tf

import batchloaders
from batchloaders.cli.main import main
from batchloaders.errors import ConfigError, DataError
from batchloaders.prepare import beam, reshard as module
from batchloaders.prepare.reshard import DestinationError, Options, reshard, shard_name
from conftest import loader_config
from test_reshard import contents, flip_byte, source

PARTS3 = sorted(["__manifest__.json"] + [shard_name(k, 3) for k in range(3)]
                + [shard_name(k, 3) + ".index" for k in range(3)])


def damage(path: str) -> None:
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(flip_byte(data, len(data) - 1))


def temps(root: str) -> list[str]:
    return [name for name in os.listdir(root) if name.startswith(".__")]


def test_overwrite_removes_links_in_dest_not_what_they_point_to(tmp_path):
    src = source(str(tmp_path / "src"))
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    dest = tmp_path / "dest"
    (dest / "sub").mkdir(parents=True)
    os.symlink(src, dest / "to-src")
    os.symlink(outside, dest / "sub" / "to-file")
    os.symlink(outside, dest / "to-file")
    before = contents(src)
    reshard(src, str(dest), Options(3, overwrite=True))
    assert contents(src) == before and outside.read_text() == "keep me"
    assert sorted(os.listdir(dest)) == PARTS3


@pytest.mark.parametrize("target, message", [
    ("elsewhere", None),  # written through the link, into its target
    (".", "expected DEST apart from SRC"),  # the link leads to SRC's parent
])
def test_dest_a_link_to_a_directory(tmp_path, target, message):
    src = source(str(tmp_path / "src"))
    (tmp_path / "elsewhere").mkdir()
    os.symlink(src, tmp_path / "elsewhere" / "to-src")
    before = contents(src)
    dest = str(tmp_path / "dest")
    os.symlink(tmp_path / target, dest)
    if message is None:
        reshard(src, dest, Options(3, overwrite=True))
        assert sorted(os.listdir(tmp_path / "elsewhere")) == PARTS3 and contents(src) == before
    else:
        with pytest.raises(ConfigError, match=message):
            reshard(src, dest, Options(3, overwrite=True))
        assert "__manifest__.json" in os.listdir(src)


def test_a_failing_overwrite_keeps_the_previous_dataset(tmp_path):
    src = source(str(tmp_path / "src"), compression=None)
    dest = str(tmp_path / "dest")
    reshard(src, dest, Options(3))
    good = contents(dest)
    damage(os.path.join(src, "in-1.tfrecords"))
    with pytest.raises(DataError, match=r"in-1\.tfrecords: record 16"):
        reshard(src, dest, Options(2, overwrite=True))
    assert contents(dest) == good and not temps(dest)


def test_a_second_reshard_into_a_dest_being_written_is_refused_and_leaves_its_temporaries(tmp_path):
    src = source(str(tmp_path / "src"))
    dest = tmp_path / "dest"
    dest.mkdir()
    release = module._locked(str(dest))  # the first run holds DEST
    (dest / ".__reshard__.part-00000-of-00002.tfrecords.abc.tmp").write_bytes(b"being written")
    try:
        with pytest.raises(ConfigError, match=rf"another reshard writing DEST \(lock file .*, pid {os.getpid()} on "):
            reshard(src, str(dest), Options(2, overwrite=True))
        assert (dest / ".__reshard__.part-00000-of-00002.tfrecords.abc.tmp").exists()
    finally:
        release()
    reshard(src, str(dest), Options(3))  # the lock gone with its run: the run's leftovers go too
    assert sorted(os.listdir(dest)) == PARTS3


def _no_space(*_):
    raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")


def _rename_failed(*_, **__):
    raise tf.errors.PermissionDeniedError(None, None, "rename refused")


@pytest.mark.parametrize("target, replacement, message", [
    (tf.io, ("TFRecordWriter", _no_space), r"dest: \.__reshard__\.part-00000-of-00003.*could not write the shard: "
                                     "No space left on device"),
    (tf.io.gfile, ("rename", _rename_failed), r"dest: \$: could not finish the dataset: rename refused"),
])
def test_write_failures_name_dest_and_leave_no_temporaries(tmp_path, monkeypatch, target, replacement, message):
    src = source(str(tmp_path / "src"))
    dest = str(tmp_path / "dest")
    monkeypatch.setattr(target, *replacement)
    with pytest.raises(DestinationError, match=message):
        reshard(src, dest, Options(3))
    assert not os.path.exists(dest)  # this run created it


def test_dest_a_file_and_src_not_there(tmp_path):
    src = source(str(tmp_path / "src"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"file: \$: found a file .*expected DEST, a directory"):
        reshard(src, str(tmp_path / "file"), Options(2))
    with pytest.raises(ConfigError, match=r"nowhere: \$: not found: expected SRC, a dataset directory holding "
                                          r"__manifest__\.json or a loader config"):
        reshard(str(tmp_path / "nowhere"), str(tmp_path / "dest"), Options(2))
    with pytest.raises(ConfigError, match="expected DEST apart from SRC"):  # not "use --overwrite"
        reshard(src, str(tmp_path), Options(2))


def test_an_interrupted_run_leaves_no_temporaries(tmp_path, monkeypatch):
    src = source(str(tmp_path / "src"))
    dest = str(tmp_path / "dest")
    write, done = module.write_shard, []

    def interrupted(task):
        if done:
            raise KeyboardInterrupt
        done.append(write(task))
        return done[-1]
    monkeypatch.setattr(module, "write_shard", interrupted)
    with pytest.raises(KeyboardInterrupt):
        reshard(src, dest, Options(3))
    assert not os.path.exists(dest)  # this run created it


@pytest.mark.parametrize("broken, message", [
    (lambda path: os.remove(path), r"in-1\.tfrecords: file: not found: its manifest entry lists this file"),
    (lambda path: (os.remove(path), os.mkdir(path)), r"in-1\.tfrecords: file: found a directory"),
])
def test_a_source_file_not_there(tmp_path, broken, message):
    src = source(str(tmp_path / "src"))
    broken(os.path.join(src, "in-1.tfrecords"))
    with pytest.raises(DataError, match=message):
        reshard(src, str(tmp_path / "dest"), Options(2))


def test_every_damaged_file_of_a_shard_is_reported(tmp_path):
    src = source(str(tmp_path / "src"), compression=None)
    for f in (0, 3):
        damage(os.path.join(src, f"in-{f}.tfrecords"))
    with pytest.raises(DataError) as raised:
        reshard(src, str(tmp_path / "dest"), Options(1))
    assert [os.path.basename(p.file) for p in raised.value.problems] == ["in-0.tfrecords", "in-3.tfrecords"]


def test_part_files_without_a_manifest_are_replaced_by_the_next_run(tmp_path):
    """What a run killed while it renamed its shards leaves: the same reshard run again completes it."""
    src = source(str(tmp_path / "src"))
    dest = str(tmp_path / "dest")
    reshard(src, dest, Options(3))
    done = contents(dest)
    os.remove(os.path.join(dest, "__manifest__.json"))
    os.remove(os.path.join(dest, shard_name(2, 3)))
    reshard(src, dest, Options(3))
    assert contents(dest) == done
    os.remove(os.path.join(dest, "__manifest__.json"))
    open(os.path.join(dest, "notes.txt"), "w").close()  # not only part files: someone else's
    with pytest.raises(ConfigError, match=r"found 7 file\(s\)"):
        reshard(src, dest, Options(3))


def test_the_api_takes_the_layout_as_keywords(tmp_path):
    src = source(str(tmp_path / "src"))
    dest = str(tmp_path / "dest")
    batchloaders.reshard(src, dest, 2)
    written = batchloaders.reshard(src, dest, 3, compression="gzip", index=False, overwrite=True)
    assert sorted(os.listdir(dest)) == sorted(["__manifest__.json"] + [shard_name(k, 3) for k in range(3)])
    with open(written[-1]) as f:
        assert json.load(f)["compression"] == "gzip"


# --- on a Beam runner ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("runner, option, message", [
    ("DirectRunner", "direct_num_workers=abc", r"--beam-option: direct_num_workers=abc: found argument "
                                               r"--direct_num_workers: invalid int value: 'abc'"),
    ("DirectRunner", "direct_num_workrs=2", r"direct_num_workrs=2: found the key 'direct_num_workrs', which no Beam "
                                            r"pipeline option has: expected 'direct_num_workers'\?"),
    ("DataflowRunner", "project", r"project: found argument --project: expected one argument"),
])
def test_beam_options_are_checked_before_anything_is_written(tmp_path, capsys, runner, option, message):
    pytest.importorskip("apache_beam")
    with pytest.raises(ConfigError, match=message):
        batchloaders.reshard(str(tmp_path), str(tmp_path / "dest"), 2, runner=runner, beam_options=[option])
    src = source(str(tmp_path / "src"))
    dest = str(tmp_path / "dest")
    with pytest.raises(SystemExit) as done:
        main(["reshard", src, dest, "--shards", "2", "--runner", runner, "--beam-option", option])
    assert done.value.code == 1 and not os.path.exists(dest)
    assert len(capsys.readouterr().err.strip().splitlines()) <= 3  # the message, not Beam's usage


def test_a_runner_that_passes_options_on_takes_any_key():
    pytest.importorskip("apache_beam")
    assert beam.runner_from("FlinkRunner", ["a_java_option=1"]).options == (("a_java_option", "1"),)


def test_an_interrupted_wait_cancels_the_job(monkeypatch):
    apache_beam = pytest.importorskip("apache_beam")
    calls = []

    class Result:
        def wait_until_finish(self):
            calls.append("wait")
            raise KeyboardInterrupt

        def cancel(self):
            calls.append("cancel")
    monkeypatch.setattr(apache_beam.Pipeline, "run", lambda self: Result())
    with pytest.raises(KeyboardInterrupt):
        beam.map_elements(len, ["ab"], beam.runner_from("DirectRunner"), label="t")
    assert calls == ["wait", "cancel"]


def test_results_travel_as_json_and_nothing_else_is_read(tmp_path):
    staging = str(tmp_path)
    runner = beam.Runner("DirectRunner")
    beam._apply((0, b"\x00\xff"), lambda item: (item, [1, "a", None], {"k": item}), staging)
    assert beam._collected(staging, 1, runner, "t") == [[b"\x00\xff", [1, "a", None], {"k": b"\x00\xff"}]]
    with pytest.raises(TypeError, match="expected plain data"):
        beam._apply((1, 0), lambda item: object(), staging)
    with open(os.path.join(staging, "000000000.json"), "wb") as f:
        f.write(pickle.dumps(os.system))  # what a writer of the staging directory could put there
    with pytest.raises(beam.BeamFailed, match=r"is no JSON result"):
        beam._collected(staging, 1, runner, "t")


def test_a_damaged_input_on_a_runner_is_located_and_leaves_nothing(tmp_path):
    pytest.importorskip("apache_beam")
    src = source(str(tmp_path / "src"), compression=None)
    damage(os.path.join(src, "in-3.tfrecords"))
    dest = str(tmp_path / "dest")
    with pytest.raises(DataError, match=r"in-3\.tfrecords: record 8: at byte [\d,]+: cannot be read"):
        batchloaders.reshard(src, dest, 3, runner="DirectRunner")
    assert not os.path.exists(dest)  # no manifest, no temporary file, no lock: the DEST this run created is gone


@pytest.mark.skipif(not os.path.exists("/proc/self"), reason="reads its pid from /proc/self")
def test_multi_processing_runs_the_elements_in_other_processes():
    pytest.importorskip("apache_beam")
    runner = beam.runner_from("DirectRunner", ["direct_running_mode=multi_processing", "direct_num_workers=2"])
    pids = beam.map_elements(os.readlink, ["/proc/self"] * 4, runner, label="pids")  # each element's own pid
    assert pids and str(os.getpid()) not in pids, pids


# --- where DEST may be, and what a failed run leaves -----------------------------------------------------------


@pytest.mark.parametrize("via_link", [False, True])
def test_dest_inside_src_is_refused_before_it_is_created(tmp_path, via_link):
    """Shards inside a dir dataset would be data files of it: `batchloaders manifest SRC` would list them too."""
    src = source(str(tmp_path / "src"))
    before = contents(src)
    if via_link:
        os.symlink(src, tmp_path / "to-src")
    dest = str(tmp_path / ("to-src" if via_link else "src") / "sub")
    with pytest.raises(ConfigError, match=r"sub: \$: found DEST inside SRC's directory .*src: expected DEST outside "
                                          r"it \(the shards would become data files of SRC"):
        reshard(src, dest, Options(3))
    assert not os.path.exists(dest) and contents(src) == before
    with pytest.raises(SystemExit) as done:
        main(["reshard", src, dest, "--shards", "3"])
    assert done.value.code == 1 and not os.path.exists(dest)
    config = str(tmp_path / "c.json")  # a config whose dir dataset is SRC
    with open(config, "w") as f:
        json.dump(loader_config(src, [("id", "id")], inputs=["id"]), f)
    with pytest.raises(ConfigError, match=r"found DEST inside SRC's directory"):
        reshard(config, dest, Options(3))
    assert not os.path.exists(dest)


def test_a_misspelt_runner_is_refused_before_anything_is_written(tmp_path, capsys):
    pytest.importorskip("apache_beam")
    with pytest.raises(ConfigError, match=r"--runner: DirectRunnr: found no Beam runner of that name: expected "
                                          r"'DirectRunner'\? .*one of .*DataflowRunner"):
        beam.runner_from("DirectRunnr")
    src = source(str(tmp_path / "src"))
    dest = str(tmp_path / "dest")
    with pytest.raises(SystemExit) as done:
        main(["reshard", src, dest, "--shards", "2", "--runner", "DirectRunnr"])
    assert done.value.code == 1 and not os.path.exists(dest)
    assert "DirectRunnr" in capsys.readouterr().err
    assert beam.runner_from("direct").name == "direct"  # Beam's own short names stay accepted


def test_a_failed_run_removes_the_dest_it_created_and_keeps_one_that_was_there(tmp_path):
    src = source(str(tmp_path / "src"), compression=None)
    damage(os.path.join(src, "in-1.tfrecords"))
    dest = tmp_path / "dest"
    with pytest.raises(DataError):
        reshard(src, str(dest), Options(2))
    assert not dest.exists()
    dest.mkdir()
    with pytest.raises(DataError):
        reshard(src, str(dest), Options(2))
    assert dest.is_dir() and os.listdir(dest) == []
