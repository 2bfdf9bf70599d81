"""What ``shuffle_window_files`` costs in shuffle quality: the order of a global shuffle in windows of K files.

    python benchmarks/window_quality.py                       # 64 files x 500 records, K = 1, 4, 16, all
    python benchmarks/window_quality.py --files 16 --records 100 --windows 1 2 --seeds 2

The order is the one a pipeline reads: the record ids ``read/global_order.ids`` gives for one epoch (the
permutation the loaders read at their offsets), computed without reading any record. Record ``r`` of file
``f`` is record ``f * records + r`` in file order (its sorted position). Per K, averaged over ``--seeds``
seeds (the epoch's permutation comes from the seed and the epoch):

* ``displacement``: the mean of |position in the order - sorted position| / n (a uniform permutation: 1/3);
* ``same file``: the fraction of neighbouring examples in the order that come from one file (uniform:
  about 1/files; read file after file: about 1);
* ``files per batch``: the mean number of distinct files in a batch of ``--batch`` consecutive examples
  (uniform: about files * (1 - (1 - 1/files) ** batch));
* ``file spread``: the mean over files of (last position of its records - first position + 1) / n, the part of
  the epoch over which a file's records are spread (uniform: nearly 1; read file after file: 1/files); it is
  also how long a file stays needed, so the working set is about ``spread x files`` files.

One markdown table on stdout; with ``--output``, the same figures as JSON. Nothing is timed or asserted; the
exit status is 1 only when an epoch does not give every record once.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository, when the package is not installed
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from batchloaders.read import global_order  # noqa: E402


def epoch_order(files: int, records: int, window: int | None, seed: int) -> np.ndarray:
    """Epoch 0's record ids in the order one input pipeline of one reads them."""
    config = types.SimpleNamespace(seed=seed, epochs=1, shuffling=types.SimpleNamespace(window_files=window))
    units = np.full(files, records, np.int64)
    return np.concatenate(list(global_order.ids(config, units, 0, 1).as_numpy_iterator()))


def quality(order: np.ndarray, records: int, batch: int) -> dict:
    """The figures of one epoch's order (see the module's docstring)."""
    n = order.size
    file = order // records
    batches = file[: n - n % batch].reshape(-1, batch)
    positions = np.empty(n, np.int64)
    positions[order] = np.arange(n)
    per_file = positions.reshape(-1, records)  # the positions of each file's records
    return {"displacement": float(np.abs(np.arange(n) - order).mean() / n),
            "same_file": float((file[1:] == file[:-1]).mean()),
            "files_per_batch": float(np.mean([np.unique(b).size for b in batches])),
            "file_spread": float(((per_file.max(1) - per_file.min(1) + 1) / n).mean())}


def measure(files: int, records: int, windows: list, seeds: int, batch: int) -> list[dict]:
    """One row per window size (None: all files), each figure the mean over the seeds."""
    rows = []
    for window in windows:
        figures = []
        for seed in range(1, seeds + 1):
            order = epoch_order(files, records, window, seed)
            if not np.array_equal(np.sort(order), np.arange(files * records)):
                raise SystemExit(f"K={window}, seed {seed}: the epoch does not give every record once")
            figures.append(quality(order, records, batch))
        row = {"window_files": window or files, "label": "all" if window is None else str(window)}
        for key in figures[0]:
            row[key] = float(np.mean([f[key] for f in figures]))
        rows.append(row)
    return rows


def table(rows: list[dict], files: int, batch: int) -> list[str]:
    lines = [f"| K (files per window) | displacement | same file (neighbours) | files per batch of {batch} | "
             "file spread |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for row in rows:
        label = row["label"] if row["label"] != "all" else f"all ({files})"
        lines.append(f"| {label} | {row['displacement']:.3f} | {row['same_file']:.3f} | "
                     f"{row['files_per_batch']:.1f} | {row['file_spread']:.3f} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--records", type=int, default=500, help="records per file")
    parser.add_argument("--windows", nargs="*", default=["1", "4", "16", "all"], help="K values, or all")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--output", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    windows = [None if w == "all" else int(w) for w in args.windows]
    rows = measure(args.files, args.records, windows, args.seeds, args.batch)
    print(f"{args.files} files x {args.records} records, mean over {args.seeds} seeds (epoch 0)")
    for line in table(rows, args.files, args.batch):
        print(line)
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"files": args.files, "records": args.records, "seeds": args.seeds, "batch": args.batch,
                       "rows": rows}, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
