"""Length bucketing: batches per bucket with their own sizes or a token budget, every example once.

Independent data: 3 files x 20 SequenceExamples; record r of file f has id = 100*f + r and
(r * 7 + f) % 23 + 1 steps of tokens 1000*id + j, so any padded row says which example it
is and how long it was. Sequence loaders: seqdata's fixtures, compared with the same seeded
run without bucketing (the windows drawn must be the same, only regrouped).
"""
from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings, strategies as st

from batchloaders import ConfigError, DataError, build_input_fn, data_errors, load_config
from batchloaders.regroup import bucketing
from batchloaders.errors import Problem
from conftest import feature, loader_config, sequence_example, write_manifest, write_records
from seqdata import sequence_config, write_continuous, write_discrete

PAD = -1


def length_of(f: int, r: int) -> int:
    return (r * 7 + f) % 23 + 1


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    d = tmp_path_factory.mktemp("bucketing") / "tokens"
    write_manifest(d, [feature("tokens", "int64", [], "int", var_len=True),
                       feature("id", "int64", [], "int", var_len=False)], allow_var_len=True)
    for f in range(3):
        write_records(d / f"part-{f}.tfrecords", [
            sequence_example({"id": ("int", [100 * f + r])},
                             {"tokens": ("int", [[1000 * (100 * f + r) + j] for j in range(length_of(f, r))])})
            for r in range(20)])
    return d


def config(data, bucketing, **args):
    args.setdefault("padding", [{"tensor": "tokens", "value": PAD}])
    return loader_config(data, [("tokens", "tokens"), ("id", "id")], inputs=["tokens"], targets=["id"],
                         target_batch_size=8, bucketing=bucketing, **args)


def batches(cfg):
    return [(f["tokens"], t["id"]) for f, t in build_input_fn(cfg)().as_numpy_iterator()]


def check_rows(tokens, ids):
    """Every row is its example, then PAD: returns the lengths."""
    lengths = []
    for row, i in zip(tokens, ids):
        n = length_of(i // 100, i % 100)
        np.testing.assert_array_equal(row[:n], 1000 * i + np.arange(n))
        assert (row[n:] == PAD).all()
        lengths.append(n)
    return lengths


BOUNDARIES, SIZES = [5, 10, 16], [6, 4, 3, 2]


def bucket_of(n: int) -> int:
    return sum(n >= b for b in BOUNDARIES)


def test_each_bucket_batches_its_lengths_with_its_size_and_every_example_once(tokens):
    got = batches(config(tokens, {"by": "tokens", "boundaries": BOUNDARIES, "batch_sizes": SIZES}))
    seen, partial = [], collections.Counter()
    for x, ids in got:
        lengths = check_rows(x, ids)
        (bucket,) = {bucket_of(n) for n in lengths}  # one bucket per batch
        assert x.shape[1] == max(lengths)  # padded to the batch maximum
        assert len(ids) <= SIZES[bucket]
        partial[bucket] += len(ids) < SIZES[bucket]
        seen.extend(ids.tolist())
    assert sorted(seen) == [100 * f + r for f in range(3) for r in range(20)]
    assert all(count <= 1 for count in partial.values())  # only the flush at the end is short


def test_pad_to_boundary_pads_to_the_longest_length_the_bucket_admits(tokens):
    got = batches(config(tokens, {"by": "tokens", "boundaries": BOUNDARIES, "batch_sizes": SIZES,
                                  "pad_to_boundary": ["tokens"]}))
    for x, ids in got:
        lengths = check_rows(x, ids)
        bucket = bucket_of(lengths[0])
        want = BOUNDARIES[bucket] - 1 if bucket < len(BOUNDARIES) else max(lengths)
        assert x.shape[1] == want


def test_a_token_budget_bounds_every_batch(tokens):
    got = batches(config(tokens, {"by": "tokens", "max_tokens": 40}))
    seen = []
    for x, ids in got:
        check_rows(x, ids)
        assert x.shape[0] * x.shape[1] <= 40
        seen.extend(ids.tolist())
    assert sorted(seen) == [100 * f + r for f in range(3) for r in range(20)]
    assert max(x.shape[0] for x, _ in got) > 1  # short examples do share batches


def test_an_example_longer_than_the_budget_is_a_data_error_naming_its_file_and_record(tokens):
    """Only the data tells how long a feature list is: the running pipeline stops at the first example over the
    budget (in reading order: file 0, record 3 has (3 * 7) % 23 + 1 = 22 steps)."""
    with pytest.raises(DataError) as caught:
        with data_errors():
            batches(config(tokens, {"by": "tokens", "max_tokens": 20}))
    assert caught.value.problems == (Problem(
        str(tokens / "part-0.tfrecords"), "record 3",
        "<dict>: $.args.bucketing.max_tokens: the record has 22 steps in tensor 'tokens', more than the budget of 20 "
        "tokens: an example over the budget fits no batch; expected max_tokens at least the longest example, or "
        "shorter examples"),)


def test_a_discrete_window_over_the_budget_is_a_data_error_naming_its_first_record(tmp_path):
    """Windows of 2 records of 3 + 4 and 2 + 9 frames: the second (from record 2) has 11 > 8."""
    write_discrete(tmp_path, [[(3, 1), (4, 1), (2, 1), (9, 1)]])
    cfg = sequence_config(tmp_path, "discrete_sequence", [("frames", "frames")], inputs=["frames"], lo=2, hi=2,
                          padding=True, bucketing={"by": "frames", "max_tokens": 8})
    with pytest.raises(DataError) as caught:
        with data_errors():
            list(build_input_fn(cfg)().as_numpy_iterator())
    assert caught.value.problems == (Problem(
        str(tmp_path / "part-0.tfrecords"), "record 2",
        "<dict>: $.args.bucketing.max_tokens: the window starting at this record has 11 steps in tensor 'frames', "
        "more than the budget of 8 tokens: an example over the budget fits no batch; expected max_tokens at least "
        "the longest example, or shorter examples"),)


SHORT_BUDGET = ("found max_tokens {budget}, fewer than the longest example's steps: tensor {by!r} {why}; an example "
                "over the budget fits no batch: expected max_tokens at least {longest}")


@pytest.mark.parametrize("loader,args,by,budget,why,longest,alternative", [
    # continuous windows of 3..9 steps: one of 9 may be drawn or not (seed 1 draws none), it never fits
    ("continuous_sequence", {"min_window": 3, "max_window": 9, "seed": 1}, "y", 8,
     "has up to 9 steps: a window holds up to max_window = 9 steps ($.args.max_window)", 9,
     ", or max_window at most 8"),
    ("continuous_sequence", {"min_window": 9, "max_window": 9}, "y", 8, "has shape [9]: 9 steps in every example", 9,
     ""),
    # a discrete window's context feature: one row per record
    ("discrete_sequence", {"min_window": 1, "max_window": 4}, "rid", 3,
     "has up to 4 steps: a window holds up to max_window = 4 records, one row each ($.args.max_window)", 4,
     ", or max_window at most 3"),
    # a fixed shape in the manifest
    ("independent", {}, "pair", 1, "has shape [2]: 2 steps in every example", 2, ""),
    # a pad_to step's fixed length
    ("independent", {"processing_steps": [{"type": "pad_to", "tensor": "frames", "args": {"size": 12}}]}, "frames", 10,
     "has shape [12, 2]: 12 steps in every example", 12, ""),
], ids=["continuous-max_window", "continuous-fixed", "discrete-context", "manifest-shape", "pad_to"])
def test_a_budget_the_config_says_some_example_exceeds_is_a_config_error(tmp_path, loader, args, by, budget, why,
                                                                         longest, alternative):
    if loader == "continuous_sequence":
        write_continuous(tmp_path, [[3, 1, 5, 2, 6, 2] * 4, [4] * 8], layout="sequence")
        primary = [("x", "x"), ("y", "y")]
    else:
        write_discrete(tmp_path, [[(3, 1), (4, 1), (2, 1), (9, 1)]])
        primary = [("frames", "frames"), ("rid", "rid"), ("pair", "pair")]
    cfg = loader_config(tmp_path, primary, inputs=[t for _, t in primary], loader=loader, padding=True,
                        bucketing={"by": by, "max_tokens": budget}, **args)
    with pytest.raises(ConfigError) as caught:
        build_input_fn(cfg)
    assert [(p.path, p.message) for p in caught.value.problems] == [(
        "$.args.bucketing.max_tokens",
        SHORT_BUDGET.format(budget=budget, by=by, why=why, longest=longest) + alternative)]


@pytest.mark.parametrize("loader", ["independent", "continuous_sequence"])
def test_a_budget_that_fits_gives_the_batches_of_its_buckets(tokens, tmp_path, loader):
    """max_tokens makes the same batches as its resolved boundaries and batch sizes given by hand, whether the
    data is checked against it (feature lists) or the config bounds it (windows of at most max_window = 9)."""
    if loader == "independent":
        cfg = config(tokens, {"by": "tokens", "max_tokens": 23})  # the longest example has 23 steps
    else:
        write_continuous(tmp_path, [[3, 1, 5, 2, 6, 2] * 4, [4] * 8], layout="sequence")
        cfg = sequence_config(tmp_path, loader, [("y", "y")], inputs=["y"], lo=3, hi=9, seed=2, padding=True,
                              target_batch_size=4, bucketing={"by": "y", "max_tokens": 9})
    spec = load_config(cfg).bucketing
    assert spec.check_longest == (loader == "independent")
    by_hand = {**cfg, "args": {**cfg["args"], "bucketing": {"by": spec.by, "boundaries": list(spec.boundaries),
                                                            "batch_sizes": list(spec.batch_sizes)}}}
    got, want = (list(build_input_fn(c)().as_numpy_iterator()) for c in (cfg, by_hand))
    assert len(got) == len(want) > 5
    for a, b in zip(got, want):
        tf.nest.map_structure(np.testing.assert_array_equal, a, b)


def test_with_shuffle_epochs_and_drop_remainder(tokens):
    shuffled = dict(shuffle=True, num_shuffle_buffer_elements=16, num_filenames_shuffle_buffer=3, num_mix_files=2,
                    seed=4, epochs=2)
    got = batches(config(tokens, {"by": "tokens", "boundaries": BOUNDARIES, "batch_sizes": SIZES}, **shuffled))
    counts = collections.Counter(i for _, ids in got for i in ids.tolist())
    assert set(counts.values()) == {2} and len(counts) == 60  # each example once per epoch
    dropped = batches(config(tokens, {"by": "tokens", "boundaries": BOUNDARIES, "batch_sizes": SIZES},
                             **{**shuffled, "drop_remainder": True}))
    for x, ids in dropped:
        lengths = check_rows(x, ids)
        assert len(ids) == SIZES[bucket_of(lengths[0])]  # only full batches
    assert len({i for _, ids in dropped for i in ids.tolist()}) > 40


def test_repeating_forever_blocks_of_static_size_regroup_correctly(tokens):
    """epochs null: the loader's blocks have a static size, the examples waiting in a bucket must not."""
    cfg = config(tokens, {"by": "tokens", "boundaries": BOUNDARIES, "batch_sizes": SIZES}, epochs=None)
    seen = collections.Counter()
    for f, t in build_input_fn(cfg)().take(40).as_numpy_iterator():
        check_rows(f["tokens"], t["id"])
        seen.update(t["id"].tolist())
    assert len(seen) == 60 and max(seen.values()) - min(seen.values()) <= 2  # every example, repeatedly


@pytest.mark.parametrize("loader", ["continuous_sequence", "discrete_sequence"])
def test_sequence_windows_are_regrouped_not_changed(tmp_path, loader):
    if loader == "continuous_sequence":
        write_continuous(tmp_path, [[3, 1, 5, 2, 6, 2] * 4, [4] * 8], layout="sequence")
        primary, lo, hi = [("x", "x"), ("y", "y")], 2, 9
    else:
        write_discrete(tmp_path, [[(1 + (f + r) % 5, 1) for r in range(10)] for f in range(2)])
        primary, lo, hi = [("frames", "x"), ("words", "words")], 1, 4
    names = [t for _, t in primary]

    def run(bucketing):
        cfg = sequence_config(tmp_path, loader, primary, inputs=names + ["n"], lo=lo, hi=hi, seed=1,
                              target_batch_size=4, padding=True, **({"bucketing": bucketing} if bucketing else {}),
                              secondary_features=[{"to_name": "n", "type": "length", "args": {"tensor": "x"}}])
        out = []
        for b in build_input_fn(cfg)().as_numpy_iterator():
            for i, n in enumerate(b["n"]):
                out.append((int(n), tuple(b["x"][i][:n].ravel().tolist())))
                if bucketing:
                    assert not b["x"][i][n:].any()
            if bucketing:
                assert len({int(n) >= 4 for n in b["n"]}) == 1  # one bucket per batch
        return out
    plain, bucketed = run(None), run({"by": "x", "boundaries": [4], "batch_sizes": [3, 2]})
    assert sorted(plain) == sorted(bucketed) and len(plain) > 8  # (seed 1 draws more than 8 for both loaders)


@pytest.mark.parametrize("block, where, words", [
    ({"by": "tokenz", "boundaries": [5], "batch_sizes": [2, 2]}, "$.args.bucketing.by",
     "tensor 'tokenz' is not a primary or secondary feature (did you mean 'tokens'?)"),
    ({"by": "id", "boundaries": [5], "batch_sizes": [2, 2]}, "$.args.bucketing.by",
     "tensor 'id' is a scalar per example"),
    ({"by": "tokens", "boundaries": [5, 5], "batch_sizes": [2, 2, 2]}, "$.args.bucketing.boundaries[1]",
     "found 5 after 5: expected boundaries that increase strictly"),
    ({"by": "tokens", "boundaries": [5], "batch_sizes": [2]}, "$.args.bucketing.batch_sizes",
     "found 1 batch sizes for 1 boundaries: expected 2"),
    ({"by": "tokens", "boundaries": [5]}, "$.args.bucketing", "found neither batch_sizes nor max_tokens"),
    ({"by": "tokens", "batch_sizes": [2], "max_tokens": 9}, "$.args.bucketing", "found both batch_sizes and max_tokens"),
    ({"by": "tokens", "boundaries": [50], "max_tokens": 9}, "$.args.bucketing.boundaries[0]",
     "found boundary 50 above max_tokens 9"),
    ({"by": "tokens", "max_tokens": 9, "pad_to_boundary": ["id"]}, "$.args.bucketing.pad_to_boundary[0]",
     "tensor 'id' has shape []: its first axis does not vary"),
    ({"by": "tokens", "boundaries": [0], "batch_sizes": [1, 1]}, "$.args.bucketing.boundaries[0]",
     "expected an integer >= 1, found 0"),
])
def test_bucketing_mistakes_are_located(tokens, block, where, words):
    with pytest.raises(ConfigError) as caught:
        load_config(config(tokens, block))
    assert [(p.path, words in p.message) for p in caught.value.problems] == [(where, True)], caught.value.problems


@pytest.mark.parametrize("block, shape, where, words", [
    # Examples wait in memory until their bucket's batch is full: each bucket's batch must fit.
    ({"by": "tokens", "boundaries": [5], "batch_sizes": [2**20, 2**20]}, [100000], "$.args.bucketing",
     "bucket 0 (lengths up to 4) batches 1048576 examples of at least 800,008 bytes"),
    ({"by": "tokens", "boundaries": [5, 16], "batch_sizes": [2, 2, 2], "pad_to_boundary": ["tokens"]}, [12],
     "$.args.bucketing.pad_to_boundary[0]",
     "tensor 'tokens' is padded to 12 steps ($.args.padding[0].shape) but bucket boundaries pad it to up to 15"),
])
def test_bucketing_against_padding_shapes(tokens, block, shape, where, words):
    with pytest.raises(ConfigError) as caught:
        load_config(config(tokens, block, padding=[{"tensor": "tokens", "value": PAD, "shape": shape}]))
    assert [(p.path, words in p.message) for p in caught.value.problems] == [(where, True)], caught.value.problems


def test_pad_to_boundary_needs_a_padded_tensor(tokens):
    cfg = config(tokens, {"by": "tokens", "boundaries": [5], "batch_sizes": [2, 2], "pad_to_boundary": ["tokens"]},
                 padding=[{"tensor": "tokens", "batching": "ragged"}])
    with pytest.raises(ConfigError, match=r"\$\.args\.bucketing\.pad_to_boundary\[0\]: tensor 'tokens' has batching "
                                          r"'ragged': only padded tensors are padded to a bucket boundary"):
        load_config(cfg)


def test_under_tf_distribute_each_buckets_batch_is_split_among_the_replicas(tokens):
    """batch_sizes are global, as target_batch_size is: 2 replicas in sync make batches of half each size."""
    cfg = config(tokens, {"by": "tokens", "boundaries": BOUNDARIES, "batch_sizes": [6, 4, 4, 2]})
    dataset = build_input_fn(cfg)(tf.distribute.InputContext(1, 0, 2))
    sizes, seen = collections.Counter(), []
    for x, ids in ((f["tokens"], t["id"]) for f, t in dataset.as_numpy_iterator()):
        (bucket,) = {bucket_of(n) for n in check_rows(x, ids)}
        assert len(ids) <= [3, 2, 2, 1][bucket]
        sizes[(bucket, len(ids))] += 1
        seen.extend(ids.tolist())
    assert sorted(seen) == [100 * f + r for f in range(3) for r in range(20)]
    assert {size for (bucket, size) in sizes if bucket == 0} >= {3}  # full batches of bucket 0 hold 6 / 2


def test_a_bucket_batch_the_replicas_cannot_share_is_a_config_error(tokens):
    cfg = config(tokens, {"by": "tokens", "boundaries": BOUNDARIES, "batch_sizes": [6, 3, 4, 2]})
    with pytest.raises(ConfigError) as caught:
        build_input_fn(cfg)(tf.distribute.InputContext(1, 0, 2))
    problem = caught.value.problems[0]
    assert problem.path == "$.args.bucketing.batch_sizes[1]"
    assert "found 3" in problem.message and "not a multiple of 2" in problem.message


def grouped_one_at_a_time(lengths, flush: bool):
    """The reference: examples join their bucket one at a time and a bucket's batch leaves when full;
    at the end (flush) every bucket's rest leaves, bucket by bucket.
    Returns [(bucket, [example numbers])]."""
    waiting = collections.defaultdict(list)
    out = []
    for i, n in enumerate(lengths):
        b = bucket_of(n)
        waiting[b].append(i)
        if len(waiting[b]) == SIZES[b]:
            out.append((b, waiting.pop(b)))
    if flush:
        out += sorted(waiting.items())
    return out


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.integers(0, 20), max_size=12), min_size=1, max_size=6), st.booleans())
def test_regrouping_blocks_of_any_widths_matches_grouping_one_example_at_a_time(tokens, blocks, flush):
    """Blocks of examples of any lengths (a block narrower or wider than the examples left waiting, empty
    blocks) regroup exactly as one example at a time would, each row holding its example's steps: in a
    tensor of numbers, of strings, of pairs per step ([examples, steps, 2]) and a number per example."""
    cfg = load_config(config(tokens, {"by": "tokens", "boundaries": BOUNDARIES, "batch_sizes": SIZES}))
    rows, first = [], 0
    for block in blocks:  # example i: steps 1000 * i + j (and strings "i.j"), then padding to its block's widest
        width = max(block, default=0)
        ids = [[(first + k, j) if j < n else None for j in range(width)] for k, n in enumerate(block)]
        rows.append({"values": {
            "tokens": np.array([[1000 * s[0] + s[1] if s else 0 for s in row] for row in ids],
                               np.int64).reshape(len(block), width),
            "tag": np.array([[f"{s[0]}.{s[1]}".encode() if s else b"" for s in row] for row in ids],
                            object).reshape(len(block), width),
            "pair": np.array([[[s[0] + s[1] / 100, -s[0]] if s else [0, 0] for s in row] for row in ids],
                             np.float64).reshape(len(block), width, 2),
            "id": np.arange(first, first + len(block), dtype=np.int64)},
            "lengths": {"tokens": np.array(block, np.int64), "tag": np.array(block, np.int64),
                        "pair": np.array(block, np.int64)}})
        first += len(block)
    spec = {"values": {"tokens": tf.TensorSpec([None, None], tf.int64), "tag": tf.TensorSpec([None, None], tf.string),
                       "pair": tf.TensorSpec([None, None, 2], tf.float64), "id": tf.TensorSpec([None], tf.int64)},
            "lengths": {n: tf.TensorSpec([None], tf.int64) for n in ("tokens", "tag", "pair")}}
    ds = tf.data.Dataset.from_generator(lambda: iter(rows), output_signature=spec)
    if flush:
        ds = ds.map(lambda e: {**e, bucketing.FLUSH: tf.constant(False)})
        ds = ds.concatenate(tf.data.Dataset.from_tensors(bucketing.last_block(ds.element_spec)))
    got = []
    for batch in bucketing.regroup(ds, cfg, flush).as_numpy_iterator():
        examples = []
        values = batch["values"]
        for row, tag, pair, i, n in zip(values["tokens"], values["tag"], values["pair"], values["id"],
                                        batch["lengths"]["tokens"]):
            np.testing.assert_array_equal(row[:n], 1000 * i + np.arange(n))
            assert tag[:n].tolist() == [f"{i}.{j}".encode() for j in range(n)]
            np.testing.assert_array_equal(pair[:n], np.stack([i + np.arange(n) / 100, np.full(n, -i)], 1))
            assert not row[n:].any() and not any(tag[n:]) and not pair[n:].any()  # only padding after it
            examples.append((int(i), int(n)))
        got.append((int(batch["bucket"]), examples))
    lengths = [n for block in blocks for n in block]
    want = [(b, [(i, lengths[i]) for i in members]) for b, members in grouped_one_at_a_time(lengths, flush)]
    assert got == want
