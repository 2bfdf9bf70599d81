"""``batchloaders bench CONFIG``: run a config's dataset and measure its throughput.

Three passes, each saying in the output what it measured:

1. **Timed**: the exact dataset ``build_input_fn(CONFIG)()`` returns is
   iterated for ``--batches`` batches or ``--seconds`` seconds, whichever comes
   first. Rates leave out the first batch, which carries the one-off start-up
   (opening files, filling shuffle and prefetch buffers).
2. **Survey** (untimed): a bare ``TFRecordDataset`` over every data file counts
   records, serialized record bytes and, for continuous_sequence, steps. MB/s
   read is the measured unit rate (examples, window steps or records in
   windows per second) times the mean serialized size of that unit.
3. **Lengths** (untimed, only when needed): the same loader is built again
   through ``loaders.<type>.batches`` and ``loaders.base.transform`` but stops
   before padding, so the valid lengths of every variable axis are still
   known. Padding efficiency = real elements (from those lengths) / elements
   of the padded batch; real data equal to the pad value is still counted as
   real. With a config seed (or no shuffling) this pass sees the very batches
   of the timed pass; with seed null it sees other batches of the same
   distribution.

Example::

    $ batchloaders bench configs/chars_independent.yaml --batches 100
"""
from __future__ import annotations

import dataclasses
import sys
import time
from typing import TextIO

import tensorflow as tf

from batchloaders.transform.batching import Batch
from batchloaders.cli.describe import padded_axes
from batchloaders.errors import BatchLoaderError, DataError, Problem
from batchloaders.transform.graphs import as_written
from batchloaders.read.parsing import parse_batch
from batchloaders.loaders import base, registry as loaders
from batchloaders.read import sharding
from batchloaders.config.kinds import kind
from batchloaders.core.model import LoaderConfig
from batchloaders.config.config import load_config
from batchloaders.input_fn import build_input_fn
from batchloaders.read.integrity import Reader
from batchloaders.read.records import tf_message
from batchloaders.regroup.measure import padding as measured_padding
from batchloaders.regroup import stage as stages

# What bench reports instead of a traceback: config problems and failures while reading data.
FAILURES = (BatchLoaderError, tf.errors.OpError)
AUTOTUNE = tf.data.AUTOTUNE
MB = 1e6
BAR_WIDTH = 30


class Progress:
    """A one-line progress bar redrawn with carriage returns, at most ten times a second."""

    def __init__(self, stream: TextIO, total: int, seconds: float):
        self.stream, self.total, self.seconds = stream, total, seconds
        self.start = time.perf_counter()
        self.drawn = -1.0

    def update(self, batches: int, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self.drawn < 0.1:
            return
        self.drawn = now
        elapsed = now - self.start
        done = min(1.0, max(batches / self.total, elapsed / self.seconds))
        filled = int(done * BAR_WIDTH)
        self.stream.write(f"\r[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {batches}/{self.total} batches "
                          f"{elapsed:5.1f}/{self.seconds:g} s")
        self.stream.flush()

    def close(self, batches: int) -> None:
        self.update(batches, force=True)
        self.stream.write("\n")
        self.stream.flush()


def batch_size_of(element) -> int:
    """Examples in one batch: the leading dimension of its first tensor."""
    return int(tf.nest.flatten(element)[0].shape[0])


def timed_pass(dataset: tf.data.Dataset, batches: int, seconds: float, progress: Progress | None):
    """Iterate ``dataset``; return (start time, [(arrival time, examples)] per batch)."""
    arrivals = []
    start = time.perf_counter()
    deadline = start + seconds
    for element in dataset:
        now = time.perf_counter()
        arrivals.append((now, batch_size_of(element)))
        if progress is not None:
            progress.update(len(arrivals))
        if len(arrivals) >= batches or now >= deadline:
            break
    if progress is not None:
        progress.close(len(arrivals))
    return start, arrivals


def _steps(config: LoaderConfig, serialized: tf.Tensor) -> tf.Tensor:
    """Steps a continuous_sequence loader sees in these records (int64 scalar)."""
    name, feature = next(iter(config.selected.items()))
    records = tf.size(serialized, out_type=tf.int64)
    if feature.var_len:
        _, lengths = parse_batch(serialized, config.dataset.manifest, {name: feature})
        return tf.reduce_sum(lengths[name])
    return records * feature.steps_per_record


def survey(config: LoaderConfig) -> dict:
    """Records, serialized record bytes, file bytes and (continuous_sequence) steps of all data files.

    Raises DataError naming the first data file that cannot be read whole (the timed pass may have
    stopped before reaching it).
    """
    files = list(config.dataset.files)
    try:
        count, size, steps = _survey_counts(config, files)
    except tf.errors.OpError as error:
        raise _unreadable(config, files, error) from None
    return {"files": len(files), "records": int(count), "record_bytes": int(size), "steps": int(steps),
            "file_bytes": sum(tf.io.gfile.stat(f).length for f in files)}


def _unreadable(config: LoaderConfig, files: list[str], error: tf.errors.OpError) -> DataError:
    """The survey's failure as a DataError naming its file: TensorFlow's error over many files names none,
    so each file is read alone until one fails."""
    manifest = config.dataset.manifest
    expected = (f"expected a TFRecord file{f' ({manifest.compression})' if manifest.compression else ''}, as the "
                f"manifest {manifest.path} says; `batchloaders verify` reads every file whole and says what is "
                "wrong where")
    for path in files:
        try:
            _survey_counts(config, [path])
        except tf.errors.OpError as own:
            return DataError(Problem(path, "record", f"cannot be read ({tf_message(own)}): {expected}"))
    return DataError(Problem("<a data file>", "record", f"cannot be read ({tf_message(error)}): {expected}"))


def _survey_counts(config: LoaderConfig, files: list[str]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(records, record bytes, steps) of ``files``, read in one reduce; tf.errors.OpError if one cannot be read."""
    records = tf.data.TFRecordDataset(files, compression_type=config.dataset.manifest.tf_compression)
    zero = tf.constant(0, tf.int64)

    def add(state, serialized):
        count, size, steps = state
        count += tf.size(serialized, out_type=tf.int64)
        size += tf.reduce_sum(tf.cast(tf.strings.length(serialized), tf.int64))
        if kind(config.type).concatenates_records:
            steps += _steps(config, serialized)
        return count, size, steps

    return records.batch(4096).reduce((zero, zero, zero), as_written(add))


def padded_tensors(config: LoaderConfig) -> list[str]:
    """Output tensors whose padded batch can hold more elements than the examples do."""
    return [name for name in config.outputs if padded_axes(config, name)]


def _window_units(config: LoaderConfig, batch: Batch) -> tf.Tensor:
    """Units the windows of this batch hold: steps (continuous_sequence) or records (discrete_sequence)."""
    size = tf.cast(batch.size, tf.int64)
    if config.window.fixed:
        return size * config.window.min_window
    selected = config.selected
    if kind(config.type).concatenates_records:
        return tf.reduce_sum(batch.lengths[next(iter(selected))])
    fixed = [name for name, f in selected.items() if not f.var_len]
    if fixed:  # a context feature has one row per record: its length is the window's record count
        return tf.reduce_sum(batch.lengths[fixed[0]])
    steps = batch.extras["record_lengths"][next(iter(selected))]
    return tf.math.count_nonzero(steps, dtype=tf.int64)  # records without steps are not counted


def lengths_dataset(config: LoaderConfig, batch_size: int) -> tf.data.Dataset:
    """The loader's batches reduced to counts: examples, window units, and real/padded elements per tensor
    (for a stage that makes examples of its own, chunking, examples and window units only: the stage's
    padding_dataset pads its examples)."""
    loader = loaders.of(config)
    own_examples = stages.of(config).makes_examples
    names = [] if own_examples else padded_tensors(config)

    def measure(element):
        batch = Batch(dict(element["values"]), dict(element["lengths"]), dict(element.get("extras", {})))
        out = {"examples": tf.cast(batch.size, tf.int64),
               "units": _window_units(config, batch) if kind(config.type).sequence else tf.constant(0, tf.int64)}
        if not names:  # (packing's rows, say: the loader's tensors are not the model's, nothing to pad here)
            return out
        return {**out, **measured_padding(base.transform(batch, config), config, names)}

    return loader.batches(config, sharding.plan(config, None), batch_size, Reader(config)).map(as_written(measure), num_parallel_calls=AUTOTUNE)


def count_lengths(config: LoaderConfig, batch_size: int, batches: int) -> dict:
    """Sum the counts of ``lengths_dataset`` over its first ``batches`` batches (with a stage that measures its
    own batches, bucketing or chunking, the padding counts come from that many of the stage's batches)."""
    totals = _sum(lengths_dataset(config, batch_size).take(batches))
    own = stages.of(config).padding_dataset(config, batch_size, padded_tensors(config))
    if own is not None:
        counted = _sum(own.take(batches))
        if "examples" in counted:  # window units per example come from the loader's blocks, regrouped as they are
            per_example = totals["units"] / totals["examples"] if totals["examples"] else 0.0
            counted["units"] = round(per_example * counted["examples"])
        totals.update(counted)
    return totals


def _sum(dataset: tf.data.Dataset) -> dict:
    initial = tf.nest.map_structure(lambda s: tf.zeros([], s.dtype), dataset.element_spec)
    totals = dataset.reduce(initial, as_written(lambda a, b: tf.nest.map_structure(tf.add, a, b)))
    return tf.nest.map_structure(int, totals)


def _rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("nan")


@dataclasses.dataclass(frozen=True)
class TimedPass:
    """What the timed pass gave and what bounded it.

    Attributes:
        start: ``time.perf_counter()`` when the pass started.
        arrivals: (time, examples) of each batch, in order.
        asked: the batches asked for (``--batches``).
        seconds_limit: the seconds allowed (``--seconds``).
    """

    start: float
    arrivals: list
    asked: int
    seconds_limit: float


def report(config: LoaderConfig, timed: TimedPass, *, files: dict, lengths: dict | None, chunks=None) -> list[str]:
    """The lines bench prints.

    Args:
        config: the benchmarked config.
        timed: the timed pass.
        files: what :func:`survey` found of the data files.
        lengths: the measured lengths and padding (:func:`count_lengths`, with ``stage_lines`` when the stage
            measured its own rows), or None when nothing was measured.
        chunks: the chunking.ChunkReport of the timed pass (with chunking), else None.

    Returns:
        The lines, in order.
    """
    start, arrivals, asked, seconds_limit = timed.start, timed.arrivals, timed.asked, timed.seconds_limit
    batches, examples = len(arrivals), sum(n for _, n in arrivals)
    total = arrivals[-1][0] - start
    first = arrivals[0][0] - start
    lines = [f"config: {config.source}", f"loader: {config.type}, batch size {config.target_batch_size}"]
    if batches >= asked:
        why = f"reached --batches {asked}"
    elif total >= seconds_limit:
        why = f"reached --seconds {seconds_limit:g}"
    else:
        why = f"the dataset ended: epochs {config.epochs}"
    lines.append(f"batches: {batches} ({why})")
    lines.append(f"examples: {examples}")
    if batches > 1:
        span = arrivals[-1][0] - arrivals[0][0]
        rate_examples, rate_batches = _rate(examples - arrivals[0][1], span), _rate(batches - 1, span)
        lines.append(f"time: {total:.3f} s; the first batch came after {first:.3f} s and is left out of the rates")
    else:
        rate_examples, rate_batches = _rate(examples, total), _rate(batches, total)
        lines.append(f"time: {total:.3f} s (one batch: the rates include the start-up)")
    lines.append(f"examples/s: {rate_examples:.1f}")
    lines.append(f"batches/s: {rate_batches:.2f}")
    if chunks is not None:
        lines.append(f"chunks (examples are chunks): {chunks} while timed (counted as cut, prefetched ones "
                     "included)")
        # What was read: the examples (records or windows) the chunks came from.
        per_chunk = chunks.sequences / chunks.chunks if chunks.chunks else 0.0
        examples, rate_examples = round(examples * per_chunk), rate_examples * per_chunk
        if lengths is not None and lengths["examples"]:  # window units per window, from the loader's own batches
            lengths = dict(lengths, units=round(lengths["units"] / lengths["examples"] * examples))
    lines.extend(_read_lines(config, files, examples, rate_examples, lengths if lengths and "units" in lengths else None))
    names = padded_tensors(config)
    if lengths is not None and "stage_lines" in lengths:  # the stage measured the rows it fills (packing)
        lines.extend(lengths["stage_lines"])
    elif names and lengths is not None:
        lines.append(f"padding efficiency (real elements / padded elements over the first {lengths['batches']} "
                     "batches; real = elements within the lengths before padding):")
        if config.shuffling.shuffle and config.seed is None:
            lines.append("  (seed null: these batches come from a second pass and differ from the timed ones, "
                         "drawn from the same distribution)")
        for name in names:
            real, padded = lengths["real"][name], lengths["padded"][name]
            lines.append(f"  {name}: {_rate(real, padded):.4f} ({real} / {padded})")
    elif config.padding:
        lines.append("padding efficiency: no output tensor varies in length or is padded to a larger shape")
    return lines


def _read_lines(config: LoaderConfig, files: dict, examples: int, rate_examples: float,
                lengths: dict | None) -> list[str]:
    where = f"all {files['records']} records of the {files['files']} data files"
    if files["records"] == 0:
        return ["read: the data files hold no record"]
    per_record, on_disk = files["record_bytes"] / files["records"], files["file_bytes"] / files["records"]
    if not kind(config.type).sequence:
        compression = config.dataset.manifest.compression
        framing = "framing" + (f" and {compression} compression" if compression else "")
        return [f"read: {rate_examples * per_record / MB:.3f} MB/s (MB = 10^6 bytes) = examples/s x mean serialized "
                f"record size {per_record:.1f} B",
                f"  the mean is over {where} (record payloads, without TFRecord framing); on disk "
                f"{rate_examples * on_disk / MB:.3f} MB/s ({on_disk:.1f} B per record with {framing})"]
    units = lengths["units"] if lengths is not None else examples * config.window.min_window
    per_window = units / examples if examples else 0.0
    rate_units = rate_examples * per_window
    if kind(config.type).concatenates_records:
        per_step = files["record_bytes"] / files["steps"] if files["steps"] else float("nan")
        return [f"read: {rate_units * per_step / MB:.3f} MB/s (MB = 10^6 bytes) = window steps/s {rate_units:.1f} "
                f"x mean serialized bytes per step {per_step:.2f} B",
                f"  window steps are the real steps of the windows (before padding; {per_window:.2f} per window); "
                f"the mean is record bytes / steps over {where} ({files['steps']} steps). Steps shared by "
                "overlapping windows count once per window; steps skipped at a file's start or end or between "
                "strided windows are read but not counted"]
    return [f"read: {rate_units * per_record / MB:.3f} MB/s (MB = 10^6 bytes) = records in windows/s "
            f"{rate_units:.1f} x mean serialized record size {per_record:.1f} B",
            f"  records in windows: {per_window:.2f} per window; the mean record size is over {where} "
            "(record payloads); records left over at a file's start or end are read but not counted"]


def run(path: str, *, batches: int = 200, seconds: float = 20.0, out: TextIO | None = None,
        progress: TextIO | None = None, trust_plugins: bool = True) -> None:
    """Benchmark the config at ``path`` and print the report to ``out`` (progress bar on ``progress``).
    ``trust_plugins``: as :func:`batchloaders.load_config` takes it."""
    out = out or sys.stdout
    config = load_config(path, trust_plugins=trust_plugins)
    input_fn = build_input_fn(config)
    dataset = input_fn()
    start, arrivals = timed_pass(dataset, batches, seconds, Progress(progress, batches, seconds) if progress else None)
    if not arrivals:
        raise BatchLoaderError(f"{config.source}: the dataset gave no batch (epochs {config.epochs}, batch size "
                               f"{config.target_batch_size}, drop_remainder {config.drop_remainder})")
    files = survey(config)
    lengths = None
    varying_windows = kind(config.type).sequence and not config.window.fixed
    stage = stages.of(config)
    if padded_tensors(config) or varying_windows or stage.makes_examples:
        lengths = count_lengths(config, config.target_batch_size, len(arrivals))
        lengths["batches"] = len(arrivals)
    stage_lines = stage.bench_lines(config, config.target_batch_size, len(arrivals))
    if stage_lines is not None:
        lengths = dict(lengths or {}, stage_lines=stage_lines)
    for line in report(config, TimedPass(start, arrivals, batches, seconds), files=files, lengths=lengths,
                       chunks=input_fn.chunk_report()):
        print(line, file=out)
