"""The verdict over paired rounds: per round ours against a rival, then the median and the spread.

Both pipelines run in the same round (run.py alternates them, the order rotating), so what the machine
does during a round moves both; the per-round ratio (or difference) cancels most of it, and the median
of those over the rounds is the figure a target is judged on. The spread (lowest to highest, and the
interquartile range) is printed beside every verdict. A verdict needs at least ``MIN_ROUNDS`` paired
rounds; with fewer the figures are shown and the verdict reads ``no verdict (N < 7 rounds)``.

Pure computation (no TensorFlow): tests/test_bench_yardsticks.py checks it with exact values.
"""
from __future__ import annotations

import dataclasses
import statistics

MIN_ROUNDS = 7


@dataclasses.dataclass(frozen=True)
class Spread:
    """Per-round values of ours against a rival (ratio ours / rival, or difference ours - rival)."""
    per_round: tuple
    median: float
    low: float
    high: float
    q1: float  # interquartile range: the first and third quartiles (inclusive method)
    q3: float


@dataclasses.dataclass(frozen=True)
class Target:
    how: str  # "ratio" (ours / rival) or "difference" (ours - rival)
    bound: float
    at_least: bool  # MET when the median >= bound; otherwise when it is <= bound
    unit: str = ""  # of a difference, e.g. "ms"


# The targets, each judged on the median of its per-round values.
TARGETS = {
    "steady vs expert": Target("ratio", 1.0, True),
    "CPU s/epoch vs idiomatic": Target("ratio", 1.0, False),
    "start-up vs idiomatic": Target("difference", 50.0, False, "ms"),
    "first call vs idiomatic": Target("difference", 100.0, False, "ms"),
}


def paired(ours: list, theirs: list, how: str = "ratio") -> Spread | None:
    """Per round ours / theirs (``how="ratio"``) or ours - theirs (``"difference"``), then the median,
    the lowest and highest and the quartiles. Rounds pair by position (round i of each); a pipeline that
    stopped early pairs only its rounds. None when no round pairs (or a value is missing)."""
    pairs = [(a, b) for a, b in zip(ours, theirs) if a is not None and b is not None]
    if not pairs:
        return None
    values = tuple(a / b if how == "ratio" else a - b for a, b in pairs)
    if len(values) > 1:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    else:
        q1 = q3 = values[0]
    return Spread(values, statistics.median(values), min(values), max(values), q1, q3)


def verdict(spread: Spread | None, target: Target, rounds: int | None = None) -> str:
    """``MET`` / ``MISS`` on the median, or ``no verdict (N < 7 rounds)`` when fewer than MIN_ROUNDS
    paired rounds (``rounds``: the number to count when the spread is one figure, e.g. a first call)."""
    if spread is None:
        return "no verdict (no paired rounds)"
    count = len(spread.per_round) if rounds is None else rounds
    if count < MIN_ROUNDS:
        return f"no verdict ({count} < {MIN_ROUNDS} rounds)"
    met = spread.median >= target.bound if target.at_least else spread.median <= target.bound
    return "MET" if met else "MISS"


def describe(spread: Spread | None, how: str = "ratio", unit: str = "") -> str:
    """The median with its spread: ``1.03x (0.95-1.10, IQR 0.99-1.06)``, ``+12 ms (-3..+30, IQR +4..+20)``;
    one value alone: ``+510 ms (one value)``."""
    if spread is None:
        return "-"
    if how == "ratio":
        fmt, sep, end = (lambda v: f"{v:.2f}"), "-", "x"
    else:
        fmt, sep, end = (lambda v: f"{v:+.0f}"), "..", f" {unit}" if unit else ""
    head = fmt(spread.median) + end
    if len(spread.per_round) == 1:
        return f"{head} (one value)"
    return (f"{head} ({fmt(spread.low)}{sep}{fmt(spread.high)}, "
            f"IQR {fmt(spread.q1)}{sep}{fmt(spread.q3)})")


def bound_text(target: Target) -> str:
    """``>= 1.00x``, ``<= +50 ms``."""
    sign = ">=" if target.at_least else "<="
    if target.how == "ratio":
        return f"{sign} {target.bound:.2f}x"
    return f"{sign} {target.bound:+.0f} {target.unit}".rstrip()


def judged(spread: Spread | None, name: str, rounds: int | None = None) -> dict:
    """One target's figures for the report and results.json: the spread, the bound and the verdict."""
    target = TARGETS[name]
    return {"target": bound_text(target), "verdict": verdict(spread, target, rounds),
            "text": describe(spread, target.how, target.unit),
            "spread": None if spread is None else dataclasses.asdict(spread)}
