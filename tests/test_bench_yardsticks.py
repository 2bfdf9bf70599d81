"""benchmarks/verdict.py's paired-round verdict (at the end, pure computation with exact values), and
benchmarks/harness.py's same-work check: a rival is admitted when its epoch holds the same examples (padding
removed) in as many batches of the same sizes as ours, in any order. Real TFRecord files: 2 files of
SequenceExamples, 7 + 6 records; record r of file f: id = 100 * f + r, 1 + r % 4 steps, step s has the frames
[id, s] and the label id + 1 (never 0, so the non-zero labels of a padded row give its length)."""
from __future__ import annotations

import pathlib
import statistics
import sys

import numpy as np
import pytest

from conftest import sequence_example, write_records

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import harness  # noqa: E402
import verdict  # noqa: E402

PER_FILE = (7, 6)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("yardsticks")
    out = []
    for f, count in enumerate(PER_FILE):
        records = []
        for r in range(count):
            ident = 100 * f + r
            steps = range(1 + r % 4)
            records.append(sequence_example({"id": ("int", [ident])},
                                            {"frames": ("float", [[ident, s] for s in steps]),
                                             "labels": ("int", [[ident + 1] for _ in steps])}))
        out.append(write_records(directory / f"part-{f}.tfrecords", records))
    return out


def parse(serialized):
    import tensorflow as tf

    context, lists, _ = tf.io.parse_sequence_example(
        serialized, context_features={"id": tf.io.FixedLenFeature([], tf.int64)},
        sequence_features={"frames": tf.io.FixedLenSequenceFeature([2], tf.float32),
                           "labels": tf.io.FixedLenSequenceFeature([], tf.int64)})
    return {"frames": lists["frames"], "id": context["id"]}, {"labels": lists["labels"]}


def records(files, interleave=True):
    import tensorflow as tf

    if interleave:  # file 0 and file 1 alternating record by record
        return tf.data.Dataset.from_tensor_slices(files).interleave(tf.data.TFRecordDataset, cycle_length=2)
    return tf.data.TFRecordDataset(list(reversed(files)))  # file 1, then file 0


def lengths(batch):
    return np.count_nonzero(batch[1]["labels"], axis=1)


def check(make):
    return harness.epoch(make, lengths_of=lengths)


def test_reordered_examples_with_other_padding_are_the_same_work(files):
    ours = check(lambda: records(files).batch(4).map(parse))
    theirs = check(lambda: records(files, interleave=False).batch(4).map(parse))
    assert ours.examples == theirs.examples == [4, 4, 4, 1]
    assert ours.digest != theirs.digest  # another order, other padding per batch
    assert harness.same_work(ours, theirs) is None
    assert ours.multiset == theirs.multiset
    assert ours.example_digests.size == 13 and np.unique(ours.example_digests).size == 13


def test_a_dropped_example_is_other_work(files):
    ours = check(lambda: records(files).batch(4).map(parse))
    theirs = check(lambda: records(files).batch(4).map(parse).map(
        lambda x, y: ({k: v[:-1] for k, v in x.items()}, {k: v[:-1] for k, v in y.items()})))
    assert theirs.examples == [3, 3, 3, 0]
    assert harness.same_work(ours, theirs) == (
        "other batch sizes; 9 examples, ours 13; 4 of ours' not among theirs, 0 of theirs not among ours'")
    first = next(iter(records(files))).numpy()
    one_less = check(lambda: records(files).filter(lambda s: s != first).batch(4).map(parse))
    assert one_less.examples == [4, 4, 4]
    assert harness.same_work(ours, one_less) == (
        "3 batches, ours 4; 12 examples, ours 13; 1 of ours' not among theirs, 0 of theirs not among ours'")


def test_a_changed_value_is_other_work(files):
    import tensorflow as tf

    def changed(x, y):  # example 100 (file 1, record 0): its one frame [100, 0] becomes [100, 1]
        hit = tf.cast(tf.equal(x["id"], 100), tf.float32)[:, None, None] * tf.constant([[[0.0, 1.0]]])
        return {"frames": x["frames"] + hit, "id": x["id"]}, y

    ours = check(lambda: records(files).batch(4).map(parse))
    theirs = check(lambda: records(files).batch(4).map(parse).map(changed))
    assert theirs.examples == ours.examples
    assert harness.same_work(ours, theirs) == (
        "13 examples, ours 13; 1 of ours' not among theirs, 1 of theirs not among ours'")


def test_same_examples_in_other_batch_sizes_are_other_work(files):
    ours = check(lambda: records(files).batch(4).map(parse))
    theirs = check(lambda: records(files).take(11).batch(4).concatenate(records(files).skip(11).batch(4)).map(parse))
    assert theirs.examples == [4, 4, 3, 2]
    assert harness.same_work(ours, theirs) == "other batch sizes"


def test_fixed_shape_examples_are_compared_row_by_row(files):
    ids = lambda rs: rs.batch(4).map(lambda s: parse(s)[0]["id"])  # noqa: E731
    ours = harness.epoch(lambda: ids(records(files)))
    assert harness.same_work(ours, harness.epoch(lambda: ids(records(files, interleave=False)))) is None
    assert harness.same_work(ours, harness.epoch(lambda: ids(records(files)).map(lambda i: i + 1000))) == (
        "13 examples, ours 13; 13 of ours' not among theirs, 13 of theirs not among ours'")


# --- benchmarks/verdict.py: paired rounds, median, spread, MET / MISS ------------------------------------


# Seven paired rounds of steady rates (ours, expert): the ratios are 1.2, 0.9, 1.1, 1.0, 0.8, 1.05, 0.95.
OURS_RATES = [120.0, 90.0, 110.0, 100.0, 80.0, 105.0, 95.0]
EXPERT_RATES = [100.0] * 7


def test_paired_ratios_give_the_median_the_extremes_and_the_quartiles():
    spread = verdict.paired(OURS_RATES, EXPERT_RATES)
    assert spread.per_round == (1.2, 0.9, 1.1, 1.0, 0.8, 1.05, 0.95)
    # sorted: 0.8 0.9 0.95 1.0 1.05 1.1 1.2; inclusive quartiles at positions 1.5 and 4.5
    assert (spread.median, spread.low, spread.high) == (1.0, 0.8, 1.2)
    assert spread.q1 == pytest.approx(0.925) and spread.q3 == pytest.approx(1.075)
    assert verdict.describe(spread) == "1.00x (0.80-1.20, IQR 0.93-1.08)"


def test_the_median_of_per_round_ratios_is_not_the_ratio_of_medians():
    # One slow round of the rival's (a busy machine) moves the ratio of medians, not the paired median.
    ours, theirs = [100.0, 100.0, 50.0], [100.0, 50.0, 50.0]
    spread = verdict.paired(ours, theirs)
    assert spread.per_round == (1.0, 2.0, 1.0) and spread.median == 1.0
    assert statistics.median(ours) / statistics.median(theirs) == 2.0


@pytest.mark.parametrize("name, ours, theirs, how, expected", [
    # steady >= 1.0x the expert: the median decides, at the bound it is MET
    ("steady vs expert", OURS_RATES, EXPERT_RATES, "ratio", "MET"),
    ("steady vs expert", [99.0] * 7, [100.0] * 7, "ratio", "MISS"),
    # CPU s/epoch <= 1.0x the idiomatic's
    ("CPU s/epoch vs idiomatic", [2.0, 2.0, 2.0, 5.0, 5.0, 5.0, 5.0], [4.0] * 7, "ratio", "MISS"),
    ("CPU s/epoch vs idiomatic", [2.0, 2.0, 2.0, 2.0, 5.0, 5.0, 5.0], [4.0] * 7, "ratio", "MET"),
    # start-up <= idiomatic + 50 ms (differences 50, 51, ...)
    ("start-up vs idiomatic", [100.0, 101.0, 90.0, 150.0, 99.0, 100.0, 140.0], [50.0] * 7, "difference", "MET"),
    ("start-up vs idiomatic", [101.0] * 7, [50.0] * 7, "difference", "MISS"),
    # six rounds: figures, no verdict
    ("steady vs expert", OURS_RATES[:6], EXPERT_RATES[:6], "ratio", "no verdict (6 < 7 rounds)"),
])
def test_verdicts_on_the_median(name, ours, theirs, how, expected):
    assert verdict.verdict(verdict.paired(ours, theirs, how), verdict.TARGETS[name]) == expected


def test_rounds_pair_by_position_and_a_pipeline_that_stopped_pairs_only_its_rounds():
    spread = verdict.paired([10.0, 20.0, 30.0], [5.0, 10.0])
    assert spread.per_round == (2.0, 2.0)
    assert verdict.paired([], [1.0]) is None and verdict.paired([None], [1.0]) is None
    assert verdict.verdict(None, verdict.TARGETS["steady vs expert"]) == "no verdict (no paired rounds)"


def test_a_first_call_is_one_value_judged_by_the_runs_rounds():
    spread = verdict.paired([612.0], [99.0], "difference")
    assert (spread.median, spread.low, spread.high, spread.q1, spread.q3) == (513.0, 513.0, 513.0, 513.0, 513.0)
    assert verdict.judged(spread, "first call vs idiomatic", rounds=7) == {
        "target": "<= +100 ms", "verdict": "MISS", "text": "+513 ms (one value)",
        "spread": {"per_round": (513.0,), "median": 513.0, "low": 513.0, "high": 513.0, "q1": 513.0, "q3": 513.0}}
    assert verdict.judged(verdict.paired([150.0], [60.0], "difference"), "first call vs idiomatic",
                          rounds=7)["verdict"] == "MET"
    assert verdict.judged(spread, "first call vs idiomatic", rounds=2)["verdict"] == "no verdict (2 < 7 rounds)"


def test_differences_are_shown_signed_in_ms():
    spread = verdict.paired([60.0, 40.0, 75.0, 52.0], [50.0, 50.0, 50.0, 50.0], "difference")
    assert spread.per_round == (10.0, -10.0, 25.0, 2.0)
    # sorted -10 2 10 25: median 6, inclusive quartiles at 0.75 and 2.25 -> -1, 13.75
    assert verdict.describe(spread, "difference", "ms") == "+6 ms (-10..+25, IQR -1..+14)"
    assert [verdict.bound_text(verdict.TARGETS[n]) for n in verdict.TARGETS] == [
        ">= 1.00x", "<= 1.00x", "<= +50 ms", "<= +100 ms"]


def test_run_pairs_each_yardstick_round_by_round():
    """run.py's summary over hand-made rounds (no pipeline is built): which rounds pair, which figure is
    judged against which bound, the read-only limit converted to frames/s."""
    import run

    def rounds(rates, cpu, first_ms, frames_per_record=None):
        return [harness.Round(build_ms=1.0, first_ms=f, examples_per_s=r, cpu_s=c, memory_mb=0.0, epoch_s=1.0,
                              frames_per_s=None if frames_per_record is None else r * frames_per_record,
                              hashed=False) for r, c, f in zip(rates, cpu, first_ms)]

    def checked(build_ms, first_ms, frames=None):
        return harness.Check("", [10], [frames], harness.Round(build_ms, first_ms, 1.0, None, 1.0, 0.0, 1.0, True))

    seven = range(7)
    ours = run.Pipeline("ours", "ours", None, checked=checked(150.0, 50.0),
                        rounds=rounds([100.0 + i for i in seven], [1.0] * 7, [60.0] * 7, 10))
    slow = run.Pipeline("slow variant", "variant", None, identical=True,
                        rounds=rounds([50.0] * 7, [1.0] * 7, [0.0] * 7, 10))
    fast = run.Pipeline("fast variant", "variant", None, identical=True,
                        rounds=rounds([100.0] * 6 + [200.0], [1.0] * 7, [0.0] * 7, 10))
    idiom = run.Pipeline("idiomatic: x", "idiomatic", None, checked=checked(40.0, 20.0),
                         rounds=rounds([50.0] * 7, [2.0] * 7, [0.0, 5.0, 10.0, 11.0, 12.0, 20.0, 30.0], 10))
    parsed = run.Pipeline("limit", "limit", None, checked=checked(0.0, 0.0, frames=40),
                          rounds=rounds([200.0] * 7, [1.0] * 7, [0.0] * 7, 10))
    read = run.Pipeline("read", "read", None, rounds=rounds([50.0] * 7, [1.0] * 7, [0.0] * 7))
    case = run.Case("c", "d", {"args": {"target_batch_size": 10}}, {}, rate="frames_per_s")
    s = run.summary(case, [ours, slow, fast, idiom, parsed, read])
    assert s["expert"] == "fast variant"  # the higher median of the identical variants
    c = s["compared"]
    # ours 1000..1060 frames/s against the expert's 1000 x6 and 2000: median of ratios 1.02, not 1030 / 1000
    assert c["steady vs expert"]["spread"]["per_round"] == (1.0, 1.01, 1.02, 1.03, 1.04, 1.05, 0.53)
    assert (c["steady vs expert"]["text"], c["steady vs expert"]["verdict"]) == (
        "1.02x (0.53-1.05, IQR 1.00-1.04)", "MET")
    assert c["steady vs idiomatic"]["spread"]["median"] == 2.06 and c["steady vs idiomatic"]["verdict"] is None
    # the read-only limit's 50 records/s at 4 frames per record (the read+parse check: 40 frames, 10 records)
    assert c["steady of read-only limit"]["spread"]["per_round"][0] == 5.0
    assert (c["CPU s/epoch vs idiomatic"]["spread"]["median"], c["CPU s/epoch vs idiomatic"]["verdict"]) == (0.5, "MET")
    # start-up: 60 ms each round against 0..30: differences 60, 55, 50, 49, 48, 40, 30 -> median 49
    assert (c["start-up vs idiomatic"]["text"], c["start-up vs idiomatic"]["verdict"]) == (
        "+49 ms (+30..+60, IQR +44..+52)", "MET")
    # first call: ours 150 + 50, idiomatic 40 + 20: +140 ms
    assert (c["first call vs idiomatic"]["text"], c["first call vs idiomatic"]["verdict"]) == (
        "+140 ms (one value)", "MISS")
    assert s["met"] == {"steady vs expert": "MET", "CPU s/epoch vs idiomatic": "MET", "start-up vs idiomatic": "MET",
                        "first call vs idiomatic": "MISS"}


@pytest.mark.parametrize("case_name, stratified, expected", [
    # mixed 100 against the rival's 50..110: ratios 2, 2, 2, 2, 1, 1, 0.91 -> 2.00x MET; stratified 90 of 100: MET
    ("floats64", [90.0] * 7, {("mixed", "sample_from_datasets"): ("2.00x (0.91-2.00, IQR 1.00-2.00)", "MET"),
                              ("stratified", "one source"): ("0.90x (0.90-0.90, IQR 0.90-0.90)", "MET")}),
    ("floats64", [89.0] * 7, {("stratified", "one source"): ("0.89x (0.89-0.89, IQR 0.89-0.89)", "MISS")}),
    # the stratified target is the on 64-float examples only
    ("speech_padded", [50.0] * 7, {("stratified", "one source"): ("0.50x (0.50-0.50, IQR 0.50-0.50)", None)}),
    # a package without the mode: no rounds of it
    ("floats64", [], {("stratified", "one source"): ("-", "no verdict (stratified did not run)")}),
])
def test_mixture_pairs_each_form_with_its_rival(case_name, stratified, expected):
    import mixture

    def rounds(rates):
        return [harness.Round(1.0, 1.0, r, None, 1.0, 0.0, 1.0, False) for r in rates]

    timed = {"one source": rounds([100.0] * 7), "mixed": rounds([100.0] * 7), "per_source": rounds([100.0] * 7),
             "stratified": rounds(stratified), "sample_from_datasets": rounds([50.0] * 4 + [100.0, 100.0, 110.0])}
    case = next(c for c in mixture.run.cases() if c.name == case_name)
    case.rate = "examples_per_s"
    got = {(c["form"], c["against"]): (c["text"], c["verdict"]) for c in mixture.compared(case, timed)}
    assert len(got) == 5
    for key, value in expected.items():
        assert got[key] == value
