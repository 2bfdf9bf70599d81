"""Sequence datasets whose every value says where it came from, for the sequence loader tests.

continuous: frame p of file f holds v = 1000*f + p (x = [v, -v], y = v).
discrete: step j of record r of file f holds v = 10000*f + 100*r + j (frames = [v, -v],
words = v); the context features are rid = 100*f + r and pair = [f, r].
"""
from __future__ import annotations

import numpy as np

from conftest import example, feature, loader_config, sequence_example, write_manifest, write_records


def continuous_value(f: int, p):
    return 1000 * f + np.asarray(p)


def write_continuous(directory, records_per_file, *, layout="example", chunk=4, compression=None):
    """records_per_file[f] = number of records of file f (example layout, ``chunk`` frames each), or
    a list of record lengths (sequence layout). Returns the directory."""
    if layout == "example":
        write_manifest(directory, [feature("x", "float32", [chunk, 2], "float"),
                                   feature("y", "int64", [chunk], "int")], compression=compression)
    else:
        write_manifest(directory, [feature("x", "float32", [2], "float", var_len=True),
                                   feature("y", "int64", [], "int", var_len=True)],
                       allow_var_len=True, compression=compression)
    for f, records in enumerate(records_per_file):
        sizes = [chunk] * records if layout == "example" else list(records)
        out, position = [], 0
        for size in sizes:
            v = continuous_value(f, np.arange(position, position + size))
            position += size
            if layout == "example":
                out.append(example(x=("float", np.stack([v, -v], 1).ravel().tolist()), y=("int", v.tolist())))
            else:
                out.append(sequence_example({}, {"x": ("float", [[float(a), float(-a)] for a in v]),
                                                  "y": ("int", [[int(a)] for a in v])}))
        write_records(directory / f"part-{f}.tfrecords", out, compression)
    return directory


def discrete_steps(f: int, r: int, n: int):
    return 10000 * f + 100 * r + np.arange(n)


def write_discrete(directory, files, *, compression=None):
    """files[f][r] = (frames, words): the lengths of record r's two feature lists."""
    write_manifest(directory, [feature("frames", "float32", [2], "float", var_len=True),
                               feature("words", "int64", [], "int", var_len=True),
                               feature("rid", "int64", [], "int", var_len=False),
                               feature("pair", "float32", [2], "float", var_len=False)],
                   allow_var_len=True, compression=compression)
    for f, records in enumerate(files):
        out = []
        for r, (n_frames, n_words) in enumerate(records):
            frames = discrete_steps(f, r, n_frames)
            out.append(sequence_example(
                {"rid": ("int", [100 * f + r]), "pair": ("float", [f, r])},
                {"frames": ("float", [[float(a), float(-a)] for a in frames]),
                 "words": ("int", [[int(a)] for a in discrete_steps(f, r, n_words)])}))
        write_records(directory / f"part-{f}.tfrecords", out, compression)
    return directory


def sequence_config(directory, loader, primary, *, inputs, lo, hi, **args):
    return loader_config(directory, primary, inputs=inputs, loader=loader, min_window=lo, max_window=hi, **args)


def windows_of(batches, name, lengths_name=None):
    """Split batches (dicts, or (features, targets) tuples) into a list of per-window arrays of ``name``,
    trimmed to the valid length given by the tensor ``lengths_name`` (a length secondary)."""
    out = []
    for batch in batches:
        tensors = batch if isinstance(batch, dict) else {**batch[0], **(batch[1] if len(batch) > 1 else {})}
        for i, row in enumerate(tensors[name]):
            out.append(row[: tensors[lengths_name][i]] if lengths_name else row)
    return out


def discrete_windows(batches, files):
    """[(file, first record, k)] of every window, checking it is k whole consecutive records of one file."""
    out = []
    for batch in batches:
        for i in range(len(batch["rid"])):
            k = int(batch["n_rid"][i])
            f, r0 = divmod(int(batch["rid"][i][0]), 100)
            records = range(r0, r0 + k)
            np.testing.assert_array_equal(batch["rid"][i][:k], [100 * f + r for r in records])
            np.testing.assert_array_equal(batch["pair"][i][:k], [[f, r] for r in records])
            frames = np.concatenate([discrete_steps(f, r, files[f][r][0]) for r in records])
            words = np.concatenate([discrete_steps(f, r, files[f][r][1]) for r in records])
            assert batch["n_frames"][i] == len(frames) and batch["n_words"][i] == len(words)
            np.testing.assert_array_equal(batch["frames"][i][:len(frames)], np.stack([frames, -frames], 1))
            np.testing.assert_array_equal(batch["words"][i][:len(words)], words)
            out.append((f, r0, k))
    return out
