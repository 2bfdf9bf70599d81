"""How many examples of each source every batch of ``mixing.batches: stratified`` holds (loaders/stratified.py).

Source i's quota of a batch of B examples is q_i = B * w_i / sum(w), in exact rational arithmetic (a weight is
read as the decimal it is written as: 0.1 is 1/10). Each batch gives every source floor(q_i) examples, and the
R = sum(q_i - floor(q_i)) examples left to R sources, at most one each: source i's k-th extra example is due
in the batches [floor((k-1)/f_i), ceil(k/f_i)), f_i = q_i - floor(q_i), and each batch gives them by Pfair
scheduling's PD² rule (:func:`_windows`; the earlier source on a tie), which keeps every one in its window when
the f_i sum to a whole number, as they do here. The rounding error is thus carried from batch to batch: a
source never receives more than 1 example away from its quota in a batch, nor more than 1 away from its
quotas summed over the batches so far (giving the extra examples to the sources furthest behind does not
keep that with 4 sources or more). After P batches, P the least common denominator of the fractional quotas, every source has
received exactly its quotas, and the schedule starts again: the table of those P batches is the schedule.

A period longer than MAX_PERIOD batches (weights whose shares need a denominator larger than that, such as
1e-300 or 9,850,112 : 1,204,511) is made of quotas rounded to 1/MAX_PERIOD of an example (largest remainder,
every source at least one example in a period): the shares are then exact over every MAX_PERIOD batches to that
rounding. Pure Python: ``describe`` asks it without TensorFlow.

With n input pipelines (:func:`for_pipeline`), a training step takes one batch from each: the step's batch
of n x B examples follows the schedule G of a batch of that size, and each pipeline's batch is the step's row
of G split n ways. The split deals the step's examples, laid out source after source, to the n pipelines in turn, so
every pipeline gets the row's count of source i divided by n, rounded down or up, and exactly B examples. The hands rotate: at step s
of the a-th period of G, pipeline p takes hand (p + a + s) mod n, so that over n periods of G every pipeline
has taken every hand of every row once: exactly 1/n of each source's examples, the rate its own share of the
source (sharding) supplies. Summed over the pipelines, every step's counts are G's row.
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

MAX_PERIOD = 4096  # batches before the schedule repeats, at most


def _exact(weight: float) -> Fraction:
    """A weight as the decimal it is written as (0.1 -> 1/10, not the float's binary fraction)."""
    return Fraction(repr(float(weight)))


def _quotas(weights: tuple[float, ...], batch_size: int) -> tuple[list[int], int]:
    """(each source's quota of a batch in units of 1/period, the period)."""
    exact = [_exact(w) for w in weights]
    quotas = [batch_size * w / sum(exact) for w in exact]
    period = math.lcm(*(q.denominator for q in quotas))
    if period <= MAX_PERIOD:
        return [int(q * period) for q in quotas], period
    period = MAX_PERIOD
    scaled = [q * period for q in quotas]
    units = [max(1, math.floor(s)) for s in scaled]
    left = batch_size * period - sum(units)
    by_remainder = sorted(range(len(scaled)), key=lambda i: (-(scaled[i] - math.floor(scaled[i])), i))
    for i in by_remainder[:max(left, 0)]:
        units[i] += 1
    for i in sorted(range(len(units)), key=lambda i: (-units[i], i))[:max(-left, 0)]:
        units[i] -= 1  # (a source raised to one unit took it from the largest)
    return units, period


@functools.lru_cache(maxsize=64)
def schedule(weights: tuple[float, ...], batch_size: int) -> tuple[tuple[int, ...], ...]:
    """Each batch's examples per source, over one period of the schedule (see the module's text).

    Args:
        weights: the sources' weights, in ``args.sources`` order (every one above 0).
        batch_size: examples per batch.

    Returns:
        One row per batch of the period, one count per source; every row sums to ``batch_size``, and each
        column sums to the source's quotas over the period.
    """
    units, period = _quotas(weights, batch_size)
    floors = [u // period for u in units]
    fractions = [u % period for u in units]  # in units of 1/period
    extra = sum(fractions) // period  # the examples each batch hands out beyond the floors
    given = [0] * len(units)  # extra examples given so far
    windows = [_windows(f, period) for f in fractions]
    rows = []
    for t in range(period):
        ready = [i for i, f in enumerate(fractions) if given[i] < f and windows[i][given[i]][0] <= t]
        chosen = set(sorted(ready, key=lambda i: windows[i][given[i]][1:] + (i,))[:extra])
        rows.append(tuple(base + (i in chosen) for i, base in enumerate(floors)))
        given = [g + (i in chosen) for i, g in enumerate(given)]
    return tuple(rows)


def _windows(units: int, period: int) -> list[tuple[int, ...]]:
    """(release, then the priority key) of each of a source's ``units`` extra examples in a period, whose share
    is units/period of an example a batch: Pfair scheduling's PD² rule. Example j (from 1) is due in the batches
    [floor((j-1)/w), ceil(j/w)), w = units/period; the earliest deadline goes first, then one whose window
    overlaps the next one's (b = 1), then the later group deadline (for shares of 1/2 or more). Given
    within its window, every example keeps the source's running count within 1 of its quotas."""
    release = [(j - 1) * period // units for j in range(1, units + 1)]
    deadline = [-(-j * period // units) for j in range(1, units + 1)]
    overlaps = [int(j * period % units != 0) for j in range(1, units + 1)]
    group = [0] * units
    if 2 * units >= period:  # the group deadline: where a run of windows of 2 overlapping by one ends
        later = period
        for j in reversed(range(units)):
            ends = [deadline[j]] if not overlaps[j] else []
            ends += [deadline[j] - 1] if deadline[j] - release[j] == 3 else []
            group[j] = deadline[j] if not overlaps[j] else later
            later = min(ends + [later])
    return [(release[j], deadline[j], -overlaps[j], -group[j]) for j in range(units)]


@functools.lru_cache(maxsize=64)
def for_pipeline(weights: tuple[float, ...], batch_size: int, pipelines: int, pipeline: int
                 ) -> tuple[tuple[int, ...], ...]:
    """One input pipeline's examples per source in each of its batches, over one period (see the module's text).

    Args:
        weights: the sources' weights, in ``args.sources`` order (every one above 0).
        batch_size: examples per batch of one pipeline.
        pipelines: input pipelines, each giving one batch of every step.
        pipeline: this pipeline's index, from 0.

    Returns:
        One row per batch, one count per source; every row sums to ``batch_size``. Row t of every pipeline,
        summed over the pipelines, is row t of ``schedule(weights, batch_size * pipelines)`` (cycled);
        each column sums to 1/pipelines of that schedule's column over ``pipelines`` of its periods.
        With one pipeline, :func:`schedule`.
    """
    steps = schedule(weights, batch_size * pipelines)
    if pipelines == 1:
        return steps
    period = len(steps)
    rows = []
    for t in range(period * pipelines):
        hand = (pipeline + t // period + t % period) % pipelines
        rows.append(_dealt(steps[t % period], pipelines, hand))
    return tuple(rows)


def _dealt(row: tuple[int, ...], hands: int, hand: int) -> tuple[int, ...]:
    """Hand ``hand`` of the ``sum(row)`` examples of a step dealt one at a time to ``hands`` hands in turn, source
    after source: position x goes to hand x % hands; source i holds positions [sum(row[:i]), sum(row[:i+1]))."""
    def dealt_before(end: int) -> int:  # positions x < end with x % hands == hand
        return max(0, (end - hand + hands - 1) // hands)
    starts = [sum(row[:i]) for i in range(len(row) + 1)]
    return tuple(dealt_before(starts[i + 1]) - dealt_before(starts[i]) for i in range(len(row)))


def per_batch(weights: tuple[float, ...], batch_size: int) -> list[tuple[int, int]]:
    """(fewest, most) examples of each source in a batch.

    Args:
        weights: the sources' weights.
        batch_size: examples per batch.

    Returns:
        One (fewest, most) per source.
    """
    rows = schedule(tuple(weights), batch_size)
    return [(min(column), max(column)) for column in zip(*rows)]
