"""What a manifest's record counts (its ``files``) tell before any record is read.

When the manifest lists every file a config reads, the number of records is
known: configs that would yield no batch at all are refused when they are
checked (naming why), and the independent loader's number of batches is
known, so the dataset declares its cardinality. A listed file whose size on
disk differs from the manifest's ``size_bytes`` changed after the manifest was
written (cut, appended or replaced): that is reported before training starts.
"""
from __future__ import annotations

import os
from typing import Callable

from batchloaders.errors import Problem
from batchloaders.config.datasets import DEFAULT_PATTERN, pattern_matcher, url_scheme
from batchloaders.config.kinds import kind
from batchloaders.config.manifest import is_sidecar
from batchloaders.config.stage_rules import given
from batchloaders.core.model import DataFile, Dataset, LoaderConfig, Manifest, file_key


def record_counts(manifest: Manifest, files) -> list[int] | None:
    """The manifest's num_records of each of ``files``, or None unless it lists every one."""
    counts = []
    for path in files:
        entry = manifest.entry(path)
        if entry is None:
            return None
        counts.append(entry.num_records)
    return counts


def size_problems(dataset: Dataset) -> list[Problem]:
    """Listed local files whose size differs from the manifest's size_bytes (a URL's size is known once
    TensorFlow reads it: its index's check, or the reader, catches a change)."""
    manifest = dataset.manifest
    index = {path: i for i, path in enumerate(manifest.files)}
    problems = []
    for path in dict.fromkeys(dataset.files):
        entry = manifest.entry(path) if url_scheme(path) is None else None
        if entry is None or entry.size_bytes is None:
            continue
        try:
            size = os.stat(path).st_size
        except OSError:
            continue  # reported when the dataset is read
        if size != entry.size_bytes:
            i = index[os.path.normpath(os.path.abspath(path))]
            problems.append(Problem(manifest.path, f"$.files[{i}].size_bytes", (
                f"data file {path} is {size:,} bytes, but the manifest records {entry.size_bytes:,} bytes "
                f"({entry.num_records:,} records): the file was cut, appended to or replaced after the manifest "
                "was written; run `batchloaders verify` on the dataset to see what changed, and "
                "`batchloaders manifest` on its directory to record it anew"), entry.line))
    return problems


def missing_files(dataset: Dataset) -> list[tuple[int, str, DataFile]]:
    """The files a dir dataset's manifest lists, that its pattern would read, and that are not there.

    Their records would be lost without a word, since a dir dataset's files are found by listing the
    directory. A list dataset names its files itself (its manifest may list more): none.

    Args:
        dataset: a resolved dataset.

    Returns:
        (place in the manifest's ``files``, path, entry) of each missing file, in the manifest's order.
    """
    if dataset.type != "dir" or not dataset.manifest.files:
        return []
    root = os.path.dirname(dataset.manifest.path)
    remote = url_scheme(root) is not None  # a URL directory was just listed: a file not listed is not there
    match = pattern_matcher(dataset.pattern or DEFAULT_PATTERN)
    read = {file_key(path) for path in dataset.files}
    missing = []
    for i, (path, entry) in enumerate(dataset.manifest.files.items()):
        relative = path[len(root) + 1:] if remote else os.path.relpath(path, root).replace(os.sep, "/")
        if (path not in read and match(relative) and not is_sidecar(os.path.basename(path))
                and (remote or not os.path.lexists(path))):
            missing.append((i, path, entry))
    return missing


def missing_problems(dataset: Dataset) -> list[Problem]:
    """The files a manifest lists with their counts that are missing (:func:`missing_files`), as problems.

    Args:
        dataset: a resolved dataset.

    Returns:
        One problem for each, at its ``files`` entry in the manifest (with its line), naming the file and its
        records.
    """
    root = os.path.dirname(dataset.manifest.path)
    return [Problem(dataset.manifest.path, f"$.files[{i}]", (
        f"data file {path} is missing, but the manifest lists it with {entry.num_records:,} records, which would "
        f"not be read: it was deleted or moved after the manifest was written; restore it, or run `batchloaders "
        f"manifest` on {root} to record the files there are"), entry.line)
        for i, path, entry in missing_files(dataset)]


def units_per_record(args: dict, loader_type: str, manifest: Manifest) -> int | None:
    """Window units one record gives: 1 record (discrete), its fixed steps (continuous), or None (varies)."""
    if kind(loader_type).stacks_record_rows:
        return 1
    steps = set()
    for p in args["primary_features"]:
        feature = manifest.features.get(p["from_name"])
        if feature is None or feature.steps_per_record is None:
            return None
        steps.add(feature.steps_per_record)
    return steps.pop() if len(steps) == 1 else None


def max_windows(units: int, lo: int, stride: int | None) -> int:
    """The most windows a file of ``units`` units can give (every window min_window long, no offset)."""
    if units < lo:
        return 0
    return (units - lo) // stride + 1 if stride else units // lo


def empty_output_problems(args: dict, loader_type: str, dataset: Dataset, check) -> None:
    """Report configs whose data, by the manifest's counts, give no batch at all."""
    counts = record_counts(dataset.manifest, dataset.files)
    if counts is None:
        return
    batch, epochs = args["target_batch_size"], args["epochs"]
    # With chunking, target_batch_size counts chunks, which the counts cannot tell: no verdict on batches.
    drop = bool(args["drop_remainder"]) and epochs is not None and not given(args, "makes_examples")
    listed = f"the manifest {dataset.manifest.path} lists {sum(counts):,} records in the {len(counts)} data file(s)"
    if sum(counts) == 0:
        check(("args", "dataset"), f"{listed}: every data file is empty, so no batch would come out; expected "
                                   "data files with records")
        return
    if not kind(loader_type).sequence:
        if drop and epochs * sum(counts) < batch:
            check(("args", "target_batch_size"), (
                f"{listed}, {epochs * sum(counts):,} examples in {epochs} epoch(s), fewer than target_batch_size "
                f"{batch} with drop_remainder true: no batch would come out; expected a target_batch_size of at "
                f"most {epochs * sum(counts):,}, or drop_remainder false"))
        return
    per_record = units_per_record(args, loader_type, dataset.manifest)
    if per_record is None:
        return
    unit = kind(loader_type).window_unit
    lo, stride = args["min_window"], args.get("stride") if kind(loader_type).concatenates_records else None
    units = [n * per_record for n in counts]
    if max(units) < lo:
        check(("args", "min_window"), (
            f"{listed}; the longest file holds {max(units):,} {unit}, fewer than min_window = {lo}: no window "
            f"would come out; expected a min_window of at most {max(units):,}"))
        return
    most = sum(max_windows(u, lo, stride) for u in units)
    if drop and epochs * most < batch:
        check(("args", "target_batch_size"), (
            f"{listed}, which give at most {most:,} windows of min_window = {lo} {unit} per epoch, "
            f"{epochs * most:,} in {epochs} epoch(s), fewer than target_batch_size {batch} with drop_remainder "
            f"true: no batch would come out; expected a smaller target_batch_size, or drop_remainder false"))


def records_per_epoch(config: LoaderConfig, shard: list[int], *,
                      share: Callable[[int, int], int] | None = None) -> int | None:
    """Examples in one epoch of one input pipeline reading files ``shard``, when the manifest's counts fix it.

    ``share(file, count)``: how many of a file's ``count`` records the pipeline keeps (sharding by
    record, see sharding.py); by default every record of the files it reads.
    Only the independent loader has a count fixed by its records (windows are
    drawn at random), and only under ``on_corrupt: fail`` (skip_file may read fewer).
    What batches the examples make is the regroup stage's to say (Stage.batches).
    """
    if kind(config.type).sequence or config.reading.on_corrupt != "fail" or config.sources:
        return None  # (a mixture's examples per epoch depend on its draws)
    counts = record_counts(config.dataset.manifest, config.dataset.files)
    if counts is None:
        return None
    return sum(share(i, counts[i]) if share is not None else counts[i] for i in shard)


def examples_in_run(config: LoaderConfig, shard: list[int], *,
                    share: Callable[[int, int], int] | None = None) -> int | None:
    """Examples one input pipeline reading files ``shard`` gives over all its epochs, when the manifest's
    counts fix them and the epochs are finite (see :func:`records_per_epoch`)."""
    per_epoch = records_per_epoch(config, shard, share=share) if config.epochs is not None else None
    return None if per_epoch is None else config.epochs * per_epoch


FRAME_BYTES = 16  # the TFRecord frame around every record: its length (8 bytes) and two checksums (4 each)
UNKNOWN_SIZE = -1


def _records_at_most(dataset: Dataset, shard, sizes) -> list[int] | None:
    """The most records each of files ``shard`` holds: its count when the manifest lists it, else (``sizes``:
    bytes of every file of the dataset, UNKNOWN_SIZE if not known) as many empty records as an uncompressed
    file of its size holds; None when neither tells."""
    out = []
    for i in shard:
        path = dataset.files[i]
        entry = dataset.manifest.entry(path)
        if entry is not None:
            out.append(entry.num_records)
        elif sizes is not None and sizes[i] != UNKNOWN_SIZE and dataset.manifest.compression is None:
            out.append(sizes[i] // FRAME_BYTES)
        else:
            return None
    return out


def most_examples(config: LoaderConfig, shard: list[int], sizes=None) -> int | None:
    """At most how many examples one input pipeline gives over all its epochs.

    The records (whatever ``on_corrupt`` skips), or the most windows of ``min_window`` each file's units can
    give (:func:`max_windows`), the records counted by the manifest or bounded by the file's size.

    Args:
        config: a checked config reading one dataset.
        shard: the places in ``config.dataset.files`` of the files the pipeline reads.
        sizes: the bytes of every file of the dataset (UNKNOWN_SIZE where not known), or None.

    Returns:
        The bound, or None when nothing bounds the examples (a compressed or remote file the manifest does
        not list, a feature list's varying steps) or the epochs are endless.
    """
    records = _records_at_most(config.dataset, shard, sizes)
    if records is None or config.epochs is None:
        return None
    loader = kind(config.type)
    if not loader.sequence:
        return config.epochs * sum(records)
    args = {"primary_features": [{"from_name": p.from_name} for p in config.primary_features]}
    per_record = units_per_record(args, config.type, config.dataset.manifest)
    if per_record is None:
        return None
    stride = config.window.stride if loader.concatenates_records else None
    return config.epochs * sum(max_windows(n * per_record, config.window.min_window, stride) for n in records)


def examples_bounded(dataset: Dataset, loader_type: str, from_names: list[str]) -> bool:
    """Whether :func:`most_examples` bounds what a dataset gives, once its local files' sizes are read.

    Args:
        dataset: a resolved dataset.
        loader_type: the config's ``type``.
        from_names: the manifest features its primary features read.

    Returns:
        True when the manifest counts every file or the files are local and uncompressed, and (the
        ``continuous_sequence`` loader) each record gives a fixed number of steps.
    """
    sizes = [0 if url_scheme(path) is None else UNKNOWN_SIZE for path in dataset.files]
    if _records_at_most(dataset, range(len(dataset.files)), sizes) is None:
        return False
    args = {"primary_features": [{"from_name": name} for name in from_names]}
    return not kind(loader_type).sequence or units_per_record(args, loader_type, dataset.manifest) is not None
