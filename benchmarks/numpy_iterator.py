"""NumPy batches/s through ``batchloaders.numpy_iterator`` against ``input_fn().as_numpy_iterator()``.

    python benchmarks/numpy_iterator.py                      # floats64 and speech_padded, 3 rounds
    python benchmarks/numpy_iterator.py --cases floats64 --rounds 5

The cases and data of run.py (benchmarks/data, written by it once), our config as run.py writes it. Each
round times one whole epoch through each side, alternating, from the first batch on (the first batch, with
the pipeline's start-up, is taken before the clock starts); medians are printed as a markdown table.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench_data  # noqa: E402
import run  # noqa: E402

import batchloaders  # noqa: E402


def _epoch(iterator) -> float:
    """Batches/s over the rest of ``iterator`` after its first batch."""
    next(iterator)
    count, start = 0, time.perf_counter()
    for _ in iterator:
        count += 1
    return count / (time.perf_counter() - start)


def measure(case, rounds: int) -> tuple[float, float]:
    config = run.with_data(case.config, os.path.join(bench_data.ROOT, case.data))
    input_fn = batchloaders.build_input_fn(config)
    tf_side, ours = [], []
    for _ in range(rounds):
        tf_side.append(_epoch(input_fn().as_numpy_iterator()))
        with batchloaders.numpy_iterator(config) as iterator:
            ours.append(_epoch(iterator))
    return statistics.median(tf_side), statistics.median(ours)


def main(argv=None) -> int:
    names = [c.name for c in run.cases()]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="*", default=["floats64", "speech_padded"], choices=names, metavar="CASE")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    bench_data.generate()  # (once: the data of run.py, kept in benchmarks/data)
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| case | as_numpy_iterator() batches/s | numpy_iterator batches/s | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for case in run.cases():
        if case.name in args.cases:
            theirs, ours = measure(case, args.rounds)
            print(f"| {case.name} | {theirs:,.0f} | {ours:,.0f} | {ours / theirs:.2f} |")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
