"""``shuffle_scope: global`` for the sequence loaders: an epoch is one permutation of all windows.

continuous (tests/seqdata.py): frame p of file f holds v = 1000*f + p (x = [v, -v], y = v), 4 frames a record;
files of 5, 0, 7 and 3 records (20, 0, 28 and 12 frames). discrete: step j of record r of file f holds
10000*f + 100*r + j; context rid = 100*f + r; files of 5, 0, 8 and 3 records.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import ResumableIterator, build_input_fn, load_config
from batchloaders.cli.main import main
from batchloaders.errors import ConfigError
from seqdata import sequence_config, write_continuous, write_discrete

CONTINUOUS_RECORDS = (5, 0, 7, 3)
DISCRETE_FILES = [[(1 + r % 3, 2 + r % 2) for r in range(n)] for n in (5, 0, 8, 3)]


def index(directory) -> str:
    with pytest.raises(SystemExit) as done:
        main(["index", str(directory)])
    assert done.value.code == 0
    return str(directory)


@pytest.fixture(scope="module")
def continuous_data(tmp_path_factory):
    return index(write_continuous(tmp_path_factory.mktemp("continuous"), list(CONTINUOUS_RECORDS)))


@pytest.fixture(scope="module")
def discrete_data(tmp_path_factory):
    return index(write_discrete(tmp_path_factory.mktemp("discrete"), DISCRETE_FILES))


GLOBAL = dict(shuffle=True, shuffle_scope="global", seed=3, epochs=2, resume="replay")


def continuous_config(d, *, size=6, stride=None, **args):
    extra = {"stride": stride} if stride is not None else {}
    return sequence_config(d, "continuous_sequence", [("y", "y"), ("x", "x")], inputs=["y", "x"], lo=size, hi=size,
                           **{**GLOBAL, "target_batch_size": 4, **extra, **args})


def discrete_config(d, **args):
    return sequence_config(d, "discrete_sequence", [("rid", "rid"), ("words", "words")], inputs=["rid", "words"],
                           lo=2, hi=2, padding=True, **{**GLOBAL, "target_batch_size": 3, **args})


def continuous_windows(batches) -> list[tuple[int, int]]:
    """(file, first frame) of every window, each checked to be `size` consecutive frames of one file."""
    out = []
    for batch in batches:
        for y, x in zip(np.asarray(batch["y"]), np.asarray(batch["x"])):
            f, p = divmod(int(y[0]), 1000)
            np.testing.assert_array_equal(y, 1000 * f + np.arange(p, p + len(y)))
            np.testing.assert_array_equal(x, np.stack([y, -y], 1).astype(np.float32))
            out.append((f, p))
    return out


def discrete_windows(batches) -> list[tuple[int, int]]:
    """(file, first record) of every window, checked to be 2 consecutive records with their words in order."""
    out = []
    for batch in batches:
        for rid, words in zip(np.asarray(batch["rid"]), np.asarray(batch["words"])):
            f, r = divmod(int(rid[0]), 100)
            assert rid.tolist() == [100 * f + r, 100 * f + r + 1]
            expected = np.concatenate([10000 * f + 100 * q + np.arange(DISCRETE_FILES[f][q][1]) for q in (r, r + 1)])
            np.testing.assert_array_equal(words[:len(expected)], expected)
            assert not words[len(expected):].any()  # padded with zeros past the window's words
            out.append((f, r))
    return out


# Every window of an epoch: continuous windows of 6 frames back to back (3, 0, 4 and 2 per file), or 3
# apart (6, 0, 9 and 4); discrete windows of 2 records (2, 0, 4 and 1 per file).
CONTINUOUS_ALL = sorted((f, 6 * j) for f, frames in enumerate((20, 0, 28, 12)) for j in range((frames - 6) // 6 + 1))
STRIDED_ALL = sorted((f, 3 * j) for f, frames in enumerate((20, 0, 28, 12)) for j in range((frames - 6) // 3 + 1))
DISCRETE_ALL = sorted((f, 2 * j) for f, n in enumerate((5, 0, 8, 3)) for j in range(n // 2))

CASES = {
    "continuous": (continuous_config, continuous_windows, CONTINUOUS_ALL, "continuous_data"),
    "discrete": (discrete_config, discrete_windows, DISCRETE_ALL, "discrete_data"),
}


@pytest.fixture(params=sorted(CASES))
def case(request):
    make, windows, every, fixture = CASES[request.param]
    return make, windows, every, request.getfixturevalue(fixture)


def test_every_window_once_per_epoch_and_each_epoch_its_own_order(case):
    make, windows, every, d = case
    got = windows(build_input_fn(make(d))())
    n = len(every)
    assert sorted(got[:n]) == every and sorted(got[n:]) == every
    assert got[:n] != got[n:] and got[:n] != every


def test_strided_continuous_windows(continuous_data):
    got = continuous_windows(build_input_fn(continuous_config(continuous_data, stride=3, epochs=1))())
    assert sorted(got) == STRIDED_ALL and got != STRIDED_ALL


@pytest.mark.parametrize("pipelines", [2, 3])
def test_pipelines_take_interleaved_positions(case, pipelines):
    make, windows, every, d = case
    whole = windows(build_input_fn(make(d))())
    fn = build_input_fn(make(d))
    for k in range(pipelines):
        context = tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=k,
                                             num_replicas_in_sync=pipelines)
        assert windows(fn(context, params={"batch_size": pipelines})) == whole[k::pipelines]


@pytest.mark.parametrize("stop", [1, 3, 5])
def test_resume_from_the_state_dict(case, stop):
    make, windows, every, d = case
    fn = build_input_fn(make(d))
    whole = windows(ResumableIterator(fn))
    first = ResumableIterator(fn)
    given = windows(next(first) for _ in range(stop))
    state = json.loads(json.dumps(first.get_state()))
    again = ResumableIterator(build_input_fn(make(d)))
    again.set_state(state)
    assert given + windows(again) == whole


def test_windows_of_several_sizes_are_refused(continuous_data):
    config = continuous_config(continuous_data)
    config["args"]["max_window"] = 8
    config["args"]["padding"] = True
    with pytest.raises(ConfigError, match=r"shuffle_scope.*min_window 6 != max_window 8"):
        load_config(config)


def test_continuous_feature_lists_are_refused(tmp_path):
    d = index(write_continuous(tmp_path / "lists", [[3, 5], [4]], layout="sequence"))
    with pytest.raises(ConfigError, match=r"shuffle_scope.*'y', 'x'.*no fixed number of steps per record"):
        load_config(continuous_config(d))


@pytest.mark.parametrize("before, after", [(2, 3), (3, 2)])
def test_elastic_restart_of_windows(case, before, after):
    """``before`` pipelines (global batch 6) give 1 batch each; ``after`` pipelines go on from the state one of
    them saved: with what was given, every window of both epochs exactly once."""
    make, windows, every, d = case
    fn = build_input_fn(make(d, target_batch_size=6))

    def pipeline(k, n):
        return tf.distribute.InputContext(num_input_pipelines=n, input_pipeline_id=k, num_replicas_in_sync=n)
    old = [ResumableIterator(fn, pipeline(k, before)) for k in range(before)]
    given = [w for iterator in old for w in windows([next(iterator)])]
    state = old[0].get_state()
    assert state["position"] == 6
    rest = []
    for k in range(after):
        iterator = ResumableIterator(fn, pipeline(k, after))
        iterator.set_state(state)
        rest += windows(iterator)
    assert sorted(given + rest) == sorted(every * 2)


def test_files_too_short_for_a_window_are_a_config_error(discrete_data):
    config = discrete_config(discrete_data, epochs=None)
    config["args"]["min_window"] = config["args"]["max_window"] = 9  # the longest file holds 8 records
    with pytest.raises(ConfigError, match=r"\$\.args\.min_window: .*the longest file holds 8 records, fewer than "
                                          r"min_window = 9"):
        build_input_fn(config)()
