"""What one tf.data function call costs, per stage kind: microseconds per element over a range dataset.

    python benchmarks/calls.py [--elements N] [--rounds R]

Each stage applies a one-node function (``x + 1``, ``x >= 0``) to every element of
``Dataset.range(N)``, consumed by ``Dataset.reduce`` in one process, with tf.data's
graph rewrites and autotuning off (as our pipelines run). ``none`` is the range
and the counting ``reduce`` (itself a function call per element, in the calling
thread); the other rows minus ``none`` are the cost of the stage and its call.
``inline map`` is ``batchloaders.transform.inline_map``: the map op with its function run in
the calling thread instead of TensorFlow's inter-op thread pool. Medians of the rounds.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

from batchloaders.runtime.quiet import import_tensorflow

tf = import_tensorflow()

from batchloaders.transform.inline_map import inline_map  # noqa: E402  (after the quiet import)


def stages() -> dict:
    plus = tf.autograph.experimental.do_not_convert(lambda x: x + 1)
    return {
        "none": lambda ds: ds,
        "map": lambda ds: ds.map(plus),
        "filter": lambda ds: ds.filter(tf.autograph.experimental.do_not_convert(lambda x: x >= 0)),
        "scan": lambda ds: ds.scan(tf.constant(0, tf.int64),
                                   tf.autograph.experimental.do_not_convert(lambda s, x: (s + x, x))),
        "inline map": lambda ds: inline_map(ds, plus),
    }


def per_element_us(make, n: int) -> float:
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    options.autotune.enabled = False
    dataset = make(tf.data.Dataset.range(n)).with_options(options)
    start = time.perf_counter()
    dataset.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1)
    return (time.perf_counter() - start) / n * 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.elements < 1 or args.rounds < 1:
        parser.error("--elements and --rounds must be at least 1")
    times = {name: [] for name in stages()}
    for _ in range(args.rounds):
        for name, make in stages().items():  # alternated, so that a slower minute hits every row
            times[name].append(per_element_us(make, args.elements))
    print(f"microseconds per element, median of {args.rounds} rounds of {args.elements:,} elements")
    for name, values in times.items():
        print(f"  {name:10s} {statistics.median(values):7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
