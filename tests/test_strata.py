"""config/strata.py: the counts of each source in every batch of ``mixing.batches: stratified`` (pure Python).

Properties over bounded weights and batch sizes, checked against quotas computed here from the weights as
written (a weight is the decimal it is written as); literal tables where a value is worked out by hand.
"""
from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from batchloaders.config.strata import MAX_PERIOD, for_pipeline, per_batch, schedule

WEIGHTS = st.lists(st.one_of(st.integers(1, 20), st.sampled_from([0.1, 0.25, 0.5, 1.5, 2.7, 0.03])),
                   min_size=1, max_size=4).map(tuple)


def quotas(weights, batch_size: int) -> list[Fraction]:
    exact = [Fraction(repr(float(w))) for w in weights]
    return [batch_size * w / sum(exact) for w in exact]


def exact_period(weights, batch_size: int) -> int:
    return math.lcm(*(q.denominator for q in quotas(weights, batch_size)))


@settings(max_examples=200, deadline=None)
@given(WEIGHTS, st.integers(1, 64))
def test_every_batch_is_whole_and_each_source_is_within_one_of_its_quotas_so_far(weights, batch_size):
    rows = schedule(weights, batch_size)
    period = exact_period(weights, batch_size)
    assert all(sum(row) == batch_size and min(row) >= 0 for row in rows)
    if period > MAX_PERIOD:  # (the rounded branch: below)
        assert len(rows) == MAX_PERIOD
        return
    q = quotas(weights, batch_size)
    assert len(rows) == period
    given_so_far = [0] * len(weights)
    for t, row in enumerate(rows, start=1):
        for i, n in enumerate(row):
            assert math.floor(q[i]) <= n <= math.ceil(q[i])
            given_so_far[i] += n
            assert abs(given_so_far[i] - t * q[i]) < 1
    assert given_so_far == [t * qi for qi in q]  # (whole numbers: each column is its quotas over the period)


@settings(max_examples=100, deadline=None)
@given(WEIGHTS, st.integers(1, 16), st.integers(1, 6))
def test_the_pipelines_batches_of_a_step_sum_to_the_step_batchs_row(weights, batch_size, pipelines):
    steps = schedule(weights, batch_size * pipelines)
    tables = [for_pipeline(weights, batch_size, pipelines, p) for p in range(pipelines)]
    assert {len(t) for t in tables} == {len(steps) * pipelines if pipelines > 1 else len(steps)}
    for t in range(len(tables[0])):
        assert all(sum(table[t]) == batch_size for table in tables)
        assert tuple(map(sum, zip(*(table[t] for table in tables)))) == steps[t % len(steps)]
    for table in tables:  # over `pipelines` periods of the step's counts: 1/pipelines of each source's examples
        assert [sum(c) for c in zip(*table)] == [sum(c) for c in zip(*steps)]


# (weights, batch size, the rows of one period), each worked out by hand from the module's rule.
TABLES = {
    # 4/3 each: one left over, to the source furthest behind (the earlier on a tie).
    "1:1:1 of 4": ((1, 1, 1), 4, ((2, 1, 1), (1, 2, 1), (1, 1, 2))),
    # 0.5 of the second source: 0 in every other batch.
    "7:1 of 4": ((7, 1), 4, ((4, 0), (3, 1))),
    # 0.1 and 0.3 read as decimals: quotas 1/4 and 3/4 of 1 example.
    # the first's example is due by the fourth batch, the second's third too: the larger share first (PD²).
    "0.1:0.3 of 1": ((0.1, 0.3), 1, ((0, 1), (0, 1), (0, 1), (1, 0))),
    # 8/3 and 16/3: (3, 5) twice then (2, 6).
    "1:2 of 8": ((1, 2), 8, ((3, 5), (3, 5), (2, 6))),
    # The share of 1303 batches where giving the extra example to the source furthest behind left the third
    # source 1.02 examples behind its quotas: every batch's example goes by its window (the property above).
    "1:6:6:0.03 of 1": ((1, 6, 6, 0.03), 1, None),
    "3:1 of 8": ((3, 1), 8, ((6, 2),)),
}


@pytest.mark.parametrize("case", TABLES, ids=list(TABLES))
def test_schedule_tables(case):
    weights, batch_size, rows = TABLES[case]
    got = schedule(weights, batch_size)
    assert got == rows if rows is not None else len(got) == 1303
    q = quotas(weights, batch_size)
    so_far = [0] * len(weights)
    for t, row in enumerate(got, start=1):
        so_far = [s + n for s, n in zip(so_far, row)]
        assert all(abs(s - t * qi) < 1 for s, qi in zip(so_far, q))


def test_a_period_past_max_period_rounds_the_quotas_to_a_4096th_of_an_example():
    """The docs' example: quotas of 64 * 9,850,112 / 11,054,623 = 57.03... and 6.97...; over 4,096 batches,
    233,580.807 and 28,563.193 examples, rounded to 233,581 and 28,563 (largest remainder)."""
    rows = schedule((9850112, 1204511), 64)
    assert len(rows) == MAX_PERIOD
    assert [sum(c) for c in zip(*rows)] == [233581, 28563]
    assert all(sum(row) == 64 for row in rows)
    assert per_batch((9850112, 1204511), 64) == [(57, 58), (6, 7)]
    # Running totals stay within 1 of the rounded quotas (units of 1/4096 of an example a batch).
    given_so_far = [0, 0]
    for t, row in enumerate(rows, start=1):
        given_so_far = [g + n for g, n in zip(given_so_far, row)]
        assert all(abs(g * MAX_PERIOD - t * u) <= MAX_PERIOD for g, u in zip(given_so_far, (233581, 28563)))


def test_a_share_under_one_example_per_period_keeps_one():
    """1e-6 of a batch of 1 rounds to 0 units of 1/4096: it is raised to 1 (every source at least one example in
    a period), taken from the largest; it is due by the period's end, and comes in its last batch."""
    rows = schedule((1, 1e-6), 1)
    assert [sum(c) for c in zip(*rows)] == [4095, 1]
    assert [t for t, row in enumerate(rows) if row[1]] == [4095]


def test_four_pipelines_split_each_step_by_turns():
    """Weights 1:2, 4 pipelines of 2: the step's batch of 8 is (3, 5), (3, 5), (2, 6) (8/3 and 16/3 carried);
    each row dealt to the 4 pipelines in turn, the hands rotating: worked out by hand for pipeline 0."""
    assert schedule((1, 2), 8) == ((3, 5), (3, 5), (2, 6))
    assert for_pipeline((1, 2), 2, 4, 0) == ((1, 1), (1, 1), (0, 2), (1, 1), (1, 1), (0, 2),
                                             (1, 1), (0, 2), (1, 1), (0, 2), (1, 1), (1, 1))
    assert for_pipeline((3, 1), 2, 4, 1) == ((2, 0), (1, 1), (1, 1), (2, 0))
    assert for_pipeline((3, 1), 2, 1, 0) == schedule((3, 1), 2)
