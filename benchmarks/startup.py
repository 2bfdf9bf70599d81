"""Start-up of our pipeline per case, split into its three parts (no hand-written pipeline, no epoch).

    python benchmarks/startup.py                                  # every case of run.py, 7 calls each
    python benchmarks/startup.py --cases floats64 continuous75 --calls 9
    TF_ENABLE_ONEDNN_OPTS=0 python benchmarks/startup.py          # compare a setting: run it both ways

Per case, one ``build_input_fn`` (not timed) and then ``--calls`` + 1 times: ``input_fn()`` (tracing
the pipeline's functions), ``iter()`` (instantiating those the iterator starts with) and the first
batch (reading, and instantiating the functions of each file as it opens). The first call of each
case is left out (it may pay tracing done once per process and setting); the medians of the others
are printed, in ms. run.py's start-up column is the same sum, over its timed rounds (each call
followed by a whole epoch); its first call column is the call left out here.
"""
from __future__ import annotations

import argparse
import gc
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

from batchloaders import build_input_fn  # noqa: E402


def measure(case, calls: int) -> list[tuple[float, float, float]]:
    """(input_fn, iter, first batch) seconds of each call after the first."""
    input_fn = build_input_fn(run.with_data(case.config, os.path.join(bench_data.ROOT, case.data)))
    out = []
    for call in range(calls + 1):
        gc.collect()  # (as run.py's harness does before each round)
        start = time.perf_counter()
        dataset = input_fn()
        built = time.perf_counter()
        iterator = iter(dataset)
        opened = time.perf_counter()
        next(iterator)
        first = time.perf_counter()
        if call:
            out.append((built - start, opened - built, first - opened))
        del iterator, dataset
    return out


def main(argv=None) -> int:
    cases = run.cases()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = [c.name for c in cases]
    parser.add_argument("--cases", nargs="*", choices=names, metavar="CASE",
                        help=f"cases of run.py (default: all): {', '.join(names)}")
    parser.add_argument("--calls", type=int, default=7,
                        help="input_fn() calls measured per case, after the first (default 7)")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error(f"--calls {args.calls}: expected at least 1")
    bench_data.generate(log=lambda *a: None)
    print(f"medians of {args.calls} calls after the first, ms; TF_ENABLE_ONEDNN_OPTS="
          f"{os.environ.get('TF_ENABLE_ONEDNN_OPTS', '(unset)')}")
    print("| case | input_fn() | iter() | first batch | total |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for case in cases:
        if args.cases and case.name not in args.cases:
            continue
        parts = measure(case, args.calls)
        medians = [statistics.median(p[k] for p in parts) * 1000 for k in range(3)]
        print(f"| {case.name} | {medians[0]:.0f} | {medians[1]:.0f} | {medians[2]:.0f} | {sum(medians):.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
