"""Resumes that need no second key and no luck (issue 54): under a global shuffle the position is the default
checkpoint, and ``get_state`` gives it; a skip or a saved position beyond the run is computed (nothing comes out)
or refused naming the run's length, never a RecursionError; a position of a global shuffle fits any batch size,
through ``numpy_iterator`` too.

Data: files of 9, 13 and 8 records, record r of file f holds id = 1000 f + r: 30 records an epoch. ``counted``
is indexed (the manifest lists every file's count and index); ``uncounted`` has a manifest of features only.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import batchloaders
from batchloaders import ResumableIterator, build_input_fn
from batchloaders.cli.main import main
from batchloaders.errors import ConfigError, ResumeError
from conftest import example, feature, loader_config, write_manifest, write_records

SIZES = (9, 13, 8)
IDS = sorted(1000 * f + r for f, n in enumerate(SIZES) for r in range(n))
N = len(IDS)
MAX = 2**63 - 1
BUFFER = dict(shuffle_scope="buffer", num_shuffle_buffer_elements=8, num_filenames_shuffle_buffer=4, num_mix_files=2)


def _write(d: str, *, indexed: bool) -> str:
    write_manifest(d, [feature("id", "int64", [], "int")])
    for f, n in enumerate(SIZES):
        write_records(os.path.join(d, f"part-{f}.tfrecords"), [example(id=("int", [1000 * f + r])) for r in range(n)])
    if indexed:
        with pytest.raises(SystemExit) as done:
            main(["index", d])
        assert done.value.code == 0
    return d


@pytest.fixture(scope="module")
def counted(tmp_path_factory) -> str:
    return _write(str(tmp_path_factory.mktemp("counted")), indexed=True)


@pytest.fixture(scope="module")
def uncounted(tmp_path_factory) -> str:
    return _write(str(tmp_path_factory.mktemp("uncounted")), indexed=False)


def config(d: str, **args) -> dict:
    """A global shuffle, seed 5, 2 epochs, batches of 4, no resume key unless given."""
    base = dict(shuffle=True, shuffle_scope="global", seed=5, epochs=2, target_batch_size=4)
    base.update(args)
    return loader_config(d, [("id", "id")], inputs=["id"], **base)


def ids(batches) -> list[list[int]]:
    return [np.asarray(b["id"]).tolist() for b in batches]


def flat(batches) -> list[int]:
    return [i for b in batches for i in b]


# 1. get_state under a global shuffle: the position is the default checkpoint.

def test_a_global_shuffle_without_a_resume_key_checkpoints_its_position(counted):
    fn = build_input_fn(config(counted))
    assert fn.config.resume == "replay"
    whole = ids(ResumableIterator(fn))
    first = ResumableIterator(fn)
    given = ids(next(first) for _ in range(3))
    state = json.loads(json.dumps(first.get_state()))
    assert {k: v for k, v in state.items() if k != "config"} == {
        "format": "batchloaders.resume/1", "seed": 5, "batches_consumed": 3, "position": 12}
    again = ResumableIterator(build_input_fn(config(counted)))
    again.set_state(state)
    assert given + ids(again) == whole
    assert sorted(flat(whole)) == sorted(IDS * 2)


@pytest.mark.parametrize("args", [dict(shuffle=False, shuffle_scope="buffer"), dict(BUFFER),
                                  dict(sloppy_interleave=True)], ids=["unshuffled", "buffer", "sloppy"])
def test_the_default_stays_state_where_no_position_fixes_the_batches(counted, args):
    assert build_input_fn(config(counted, **args)).config.resume == "state"


def test_an_explicit_resume_state_under_a_global_shuffle_keeps_the_iterator_checkpoint(counted, tmp_path):
    cfg = config(counted, resume="state")
    fn = build_input_fn(cfg)
    first = ResumableIterator(fn)
    assert first.mode == "state"
    given = ids(next(first) for _ in range(3))
    with pytest.raises(ResumeError) as refused:
        first.get_state()
    said = str(refused.value)
    assert "$.args.resume" in said and "resume: state" in said and "shuffle_scope global" in said
    assert "no resume key" in said
    path = tf.train.Checkpoint(iterator=first).save(str(tmp_path / "ckpt"))
    again = ResumableIterator(build_input_fn(cfg))
    tf.train.Checkpoint(iterator=again).restore(path)
    assert given + ids(again) == ids(ResumableIterator(fn))


def test_a_state_checkpoint_of_a_global_shuffle_restores_into_the_position_default(counted, tmp_path):
    """A checkpoint saved in state mode holds the position too: the default (replay) goes on from it, and what it
    saves next is a replay checkpoint."""
    saving = ResumableIterator(build_input_fn(config(counted, resume="state")))
    given = ids(next(saving) for _ in range(5))
    path = tf.train.Checkpoint(iterator=saving).save(str(tmp_path / "state"))
    fn = build_input_fn(config(counted))
    again = ResumableIterator(fn)
    tf.train.Checkpoint(iterator=again).restore(path)
    rest = ids(again)
    assert given + rest == ids(ResumableIterator(fn))
    assert json.loads(again._fingerprint.numpy().decode())["mode"] == "replay"


def test_a_state_checkpoint_of_a_global_shuffle_with_another_batch_size_is_refused_naming_it(counted, tmp_path):
    """The tf.data iterator's state is that of the pipeline's batches: another batch size cannot take it."""
    fn = build_input_fn(config(counted, resume="state"))
    saving = ResumableIterator(fn)
    next(saving)
    path = tf.train.Checkpoint(iterator=saving).save(str(tmp_path / "ckpt"))
    other = ResumableIterator(fn, params={"batch_size": 6})
    tf.train.Checkpoint(iterator=other).restore(path)
    with pytest.raises(ResumeError, match=r"batch_size: saved 4, now 6"):
        next(other)


# 2. A skip beyond the run: computed, nothing comes out.

@pytest.mark.timeout(300)
@pytest.mark.parametrize("skip", [2**31 + 3, 10**18, MAX, 10**30])
@pytest.mark.parametrize("where", ["global", "buffer counted", "buffer uncounted"])
def test_a_skip_beyond_the_run_gives_nothing(counted, uncounted, where, skip):
    d = uncounted if where == "buffer uncounted" else counted
    fn = build_input_fn(config(d, **({} if where == "global" else BUFFER)))
    dataset = fn(skip_batches=skip)
    assert list(dataset) == []
    if where != "buffer uncounted":
        assert int(dataset.cardinality()) == 0


def test_a_skip_within_the_run_gives_the_rest(counted):
    fn = build_input_fn(config(counted, **BUFFER))
    whole = ids(fn())
    assert ids(fn(skip_batches=13)) == whole[13:] and len(whole) == 15


@pytest.mark.timeout(300)
def test_a_skip_in_an_endless_run_is_computed_or_refused(counted, uncounted):
    endless = build_input_fn(config(uncounted, epochs=None, **BUFFER))
    # Counted only as made: the skip is one op (tf.data's own counts in int32), the run endless.
    assert int(endless(skip_batches=2**40).cardinality()) == tf.data.INFINITE_CARDINALITY
    with pytest.raises(ConfigError, match=r"\$\.skip_batches: found 10{30}.*endless"):
        endless(skip_batches=10**30)
    counted_endless = build_input_fn(config(counted, epochs=None, **BUFFER))
    first = ids(counted_endless(skip_batches=10**18).take(2))
    assert all(len(b) == 4 and set(b) <= set(IDS) for b in first)
    big = build_input_fn(config(counted, epochs=None, target_batch_size=64))
    with pytest.raises(ConfigError, match=r"\$\.skip_batches: found 9223372036854775807.*epoch"):
        big(skip_batches=MAX)


# 15a. numpy_iterator under a global shuffle: the position fits any target_batch_size.

@pytest.mark.parametrize("batch_size", [6, 30])
def test_numpy_iterator_resumes_a_global_shuffle_with_another_target_batch_size(counted, batch_size):
    first = batchloaders.numpy_iterator(config(counted))
    whole = flat(ids(batchloaders.numpy_iterator(config(counted))))
    given = [next(first)["id"].tolist() for _ in range(2)]
    state = json.loads(json.dumps(first.get_state()))
    assert state["position"] == 8
    later = batchloaders.numpy_iterator(config(counted, target_batch_size=batch_size))
    later.set_state(state)
    rest = ids(later)
    assert flat(given) + flat(rest) == whole
    assert [len(b) for b in rest] == [batch_size] * (52 // batch_size) + ([52 % batch_size] if 52 % batch_size else [])


def test_a_global_state_of_another_config_is_still_refused(counted):
    first = ResumableIterator(build_input_fn(config(counted)))
    next(first)
    with pytest.raises(ResumeError, match=r"\$\.config.*another config"):
        ResumableIterator(build_input_fn(config(counted, epochs=3))).set_state(first.get_state())


# 15b. A saved position beyond the run: refused at set_state naming the run's length.

def _state_of(fn, **changes) -> dict:
    return {**ResumableIterator(fn).get_state(), **changes}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("consumed", [16, 10**6, MAX])
def test_a_count_past_the_end_is_refused_naming_the_run(counted, consumed):
    fn = build_input_fn(config(counted, resume="replay", **BUFFER))  # 60 examples: 15 batches of 4
    with pytest.raises(ResumeError) as refused:
        ResumableIterator(fn).set_state(_state_of(fn, batches_consumed=consumed))
    said = str(refused.value)
    assert f"$.batches_consumed: found {consumed}" in said and "15 batches" in said and "at most 15" in said


def test_the_count_at_the_end_is_taken_and_gives_itself_back(counted):
    fn = build_input_fn(config(counted, resume="replay", **BUFFER))
    at_end = ResumableIterator(fn)
    at_end.set_state(_state_of(fn, batches_consumed=15))
    assert list(at_end) == []
    ResumableIterator(fn).set_state(at_end.get_state())


@pytest.mark.timeout(300)
@pytest.mark.parametrize("consumed", [16, MAX])
def test_a_count_of_a_run_counted_only_as_made_is_taken_and_gives_nothing_past_its_end(uncounted, consumed):
    """No manifest counts: the run's length is not known at set_state; the restore reads it and gives nothing."""
    fn = build_input_fn(config(uncounted, resume="replay", **BUFFER))
    batches = ResumableIterator(fn)
    batches.set_state(_state_of(fn, batches_consumed=consumed))
    assert list(batches) == []
    assert batches.get_state()["batches_consumed"] == consumed


@pytest.mark.parametrize("position", [61, 10**6, MAX])
def test_a_position_past_the_end_is_refused_naming_the_run(counted, position):
    fn = build_input_fn(config(counted))
    with pytest.raises(ResumeError) as refused:
        ResumableIterator(fn).set_state(_state_of(fn, position=position))
    said = str(refused.value)
    assert f"$.position: found {position}" in said and "60 positions" in said and "at most 60" in said


def test_the_position_after_a_short_last_batch_is_the_runs_end_and_is_taken_back(counted):
    """Batches of 7: the ninth holds the last 4 of 60 positions; the state after it says 60, not 63."""
    fn = build_input_fn(config(counted, target_batch_size=7))
    batches = ResumableIterator(fn)
    given = ids(batches)
    assert [len(b) for b in given] == [7] * 8 + [4]
    state = batches.get_state()
    assert state["position"] == 60 and state["batches_consumed"] == 9
    later = ResumableIterator(fn)
    later.set_state(state)
    assert list(later) == []
    numpy_batches = batchloaders.numpy_iterator(config(counted, target_batch_size=7))
    assert len(list(numpy_batches)) == 9 and numpy_batches.get_state()["position"] == 60


def test_an_endless_run_takes_any_count_and_stops_before_its_counter_overflows(counted):
    fn = build_input_fn(config(counted, epochs=None, resume="replay", **BUFFER))
    near = ResumableIterator(fn)
    near.set_state(_state_of(fn, batches_consumed=MAX - 1))
    assert len(ids([next(near)])[0]) == 4
    state = near.get_state()
    assert state["batches_consumed"] == MAX
    at_max = ResumableIterator(fn)
    at_max.set_state(state)  # every state it gave is taken back
    with pytest.raises(ResumeError, match=r"\$\.batches_consumed: .*9223372036854775807.*endless"):
        next(at_max)


def test_an_endless_global_run_takes_any_position_and_stops_before_it_overflows(counted):
    fn = build_input_fn(config(counted, epochs=None))
    near = ResumableIterator(fn)
    near.set_state(_state_of(fn, position=MAX - 4))
    assert len(ids([next(near)])[0]) == 4
    assert near.get_state()["position"] == MAX
    with pytest.raises(ResumeError, match=r"\$\.position: .*9223372036854775807.*endless"):
        next(near)
