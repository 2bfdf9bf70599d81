"""``batchloaders bench CONFIG --stages``: where an epoch's time goes.

The same epoch (every data file, every record: ``epochs`` 1, the last smaller batch kept, run in this
process even under a ``service`` block) goes through four pipelines, each cut after one more stage and
built from the package's own pieces:

1. **read**: the data files' records, through the reader and interleave the loader reads with
   (``sources.read_blocks``; records one by one where the loader shuffles them, then in blocks);
2. **parse**: the loader's blocks of examples as the config's regroup stage asks for them
   (``loaders.base.source`` with the stage's ``source_plan``), decoded;
3. **secondary features and steps**: those blocks through ``loaders.base.transform`` as well;
4. **regroup, batching and padding**: the whole pipeline, ``build_input_fn(config)()``.

Each cut is drained by one ``Dataset.reduce`` that counts what it gives (no Python per element); its time
includes its start-up (opening files, instantiating its functions), which dominates on small data. The
four cuts are timed in turn, in rounds (:func:`run_cuts`), and each keeps its fastest run. A stage's time
is its cut's time minus the cut before's, 0 ("within noise") when the later cut ran faster. The files are
read once before timing, so that every cut finds them in the same (operating system) cache.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Callable, TextIO

import tensorflow as tf

from batchloaders.config.config import load_config
from batchloaders.config.kinds import kind
from batchloaders.errors import BatchLoaderError
from batchloaders.input_fn import build_input_fn
from batchloaders.loaders import base, registry as loaders
from batchloaders.read import determinism, sharding, sources
from batchloaders.read.integrity import Reader
from batchloaders.regroup import stage as stages
from batchloaders.regroup.blocks import parallel
from batchloaders.core.model import LoaderConfig
from batchloaders.transform.graphs import as_written

LABELS = ("read", "parse", "secondary features and steps", "regroup, batching and padding")
MAX_ROUNDS = 5


@dataclasses.dataclass(frozen=True)
class Cut:
    """One cut's run: its time, the rows it gave (records, examples or batch rows) and its elements."""

    seconds: float
    count: int
    unit: str
    elements: int


def epoch_config(config: LoaderConfig) -> LoaderConfig:
    """``config`` for one epoch of every example (no batch dropped), run in this process."""
    return dataclasses.replace(config, epochs=1, drop_remainder=False, service=None)


def _per_iterator(config: LoaderConfig, build: Callable[[], tf.data.Dataset]) -> tf.data.Dataset:
    """``build()`` with its draws seeded as input_fn seeds them (read/determinism.py)."""
    return determinism.per_iterator(build, config.seed, flat=not determinism.draws(config))


def read_cut(config: LoaderConfig, reader: Reader) -> tf.data.Dataset:
    """Cut 1: the records of one epoch, read as the loader reads them."""
    shard = sharding.plan(config, None)
    one_by_one = not kind(config.type).sequence and not sources.reads_in_blocks(config)

    def epoch():
        records = sources.read_blocks(config, reader, sources.file_names(config, shard, repeat=False),
                                      form=sources.RECORDS if one_by_one else sources.BLOCKS)
        # Handed on in blocks, as the loader's batching does: the reduce would cost a call per record.
        return records.batch(sources.records_per_block(config)) if one_by_one else records
    return _per_iterator(config, lambda: sources.repeat_epochs(config, epoch)).with_options(sources.options(config))


def loader_cut(config: LoaderConfig, reader: Reader, *, transformed: bool) -> tf.data.Dataset:
    """Cut 2 (``transformed`` False): the loader's blocks decoded; cut 3: with secondary features and steps."""
    wanted = stages.of(config).source_plan(config, config.target_batch_size)
    source_config = dataclasses.replace(config, drop_remainder=wanted.drop_remainder)
    loader, shard = loaders.of(config), sharding.plan(config, None)
    tails = base.zero_tails(loader, config)

    def block(element, decode):
        if not transformed:
            return decode(element)
        batch = base.decoded(element, config, decode, tails)
        return {"values": batch.values, "lengths": batch.lengths}

    def build():
        elements, decode = base.source(loader, source_config, shard, wanted.block, reader)
        return elements.map(as_written(lambda element: block(element, decode)), **parallel(config))
    return _per_iterator(config, build).with_options(sources.options(config))


def _rows(tensor) -> tf.Tensor:
    """The length of a batched tensor's first axis (int64), dense, ragged or sparse."""
    if isinstance(tensor, tf.SparseTensor):
        return tensor.dense_shape[0]
    if isinstance(tensor, tf.RaggedTensor):
        return tensor.nrows(out_type=tf.int64)
    return tf.shape(tensor, out_type=tf.int64)[0]


def drain(dataset: tf.data.Dataset, rows: Callable, unit: str) -> Cut:
    """Run ``dataset`` to its end in one reduce, counting its elements and ``rows(element)``."""
    zero = tf.constant(0, tf.int64)
    add = as_written(lambda state, element: (state[0] + 1, state[1] + rows(element)))
    start = time.perf_counter()
    elements, count = dataset.reduce((zero, zero), add)
    return Cut(time.perf_counter() - start, int(count), unit, int(elements))


def _records(element) -> tf.Tensor:
    return tf.size(element["serialized"], out_type=tf.int64)


def _examples(element) -> tf.Tensor:
    return _rows(tf.nest.flatten(element["values"])[0])


def _batch_rows(element) -> tf.Tensor:
    return _rows(tf.nest.flatten(element)[0])


def run_cuts(config: LoaderConfig, *, seconds: float, progress: TextIO | None = None) -> tuple[list[Cut], int]:
    """Time the four cuts of ``config`` (an epoch_config) after reading the files once: (each cut's fastest
    run, rounds). Rounds of the four cuts in turn go on while another fits in ``seconds``, up to MAX_ROUNDS:
    the minimum leaves out what other processes took meanwhile, and alternating spreads it over the cuts."""
    reader = Reader(config)
    row_unit = "examples" if config.regroup is None else "batch rows"
    plans = [(read_cut(config, reader), _records, "records"),
             (loader_cut(config, reader, transformed=False), _examples, "examples"),
             (loader_cut(config, reader, transformed=True), _examples, "examples"),
             (build_input_fn(config)(), _batch_rows, row_unit)]
    _say(progress, "reading every data file once (untimed), so that every cut finds them in the cache")
    drain(*plans[0])
    fastest: list[Cut | None] = [None] * len(plans)
    start, rounds = time.perf_counter(), 0
    while rounds < MAX_ROUNDS:
        rounds += 1
        _say(progress, f"round {rounds}: timing the four cuts")
        for i, plan in enumerate(plans):
            cut = drain(*plan)
            if fastest[i] is None or cut.seconds < fastest[i].seconds:
                fastest[i] = cut
        elapsed = time.perf_counter() - start
        if elapsed + elapsed / rounds > seconds:
            break
    return fastest, rounds


def _say(stream: TextIO | None, text: str) -> None:
    if stream is not None:
        print(text, file=stream, flush=True)


def stage_seconds(cuts: list[Cut]) -> list[float]:
    """Each stage's time: its cut's minus the cut before's, never below 0."""
    return [cuts[0].seconds] + [max(0.0, later.seconds - earlier.seconds) for earlier, later in zip(cuts, cuts[1:])]


def shares(seconds: list[float]) -> list[float]:
    """Percent of the sum per stage, in tenths rounded so that they add up to exactly 100.0 (largest remainder)."""
    total = sum(seconds)
    exact = [1000 * s / total for s in seconds] if total > 0 else [1000.0] + [0.0] * (len(seconds) - 1)
    tenths = [int(e) for e in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: exact[i] - tenths[i], reverse=True)
    for i in by_remainder[:1000 - sum(tenths)]:
        tenths[i] += 1
    return [t / 10 for t in tenths]


def _setting(value) -> str:
    return "AUTOTUNE" if value is None else f"{value:,}"


def ran_by_steps(config: LoaderConfig) -> str:
    """What the steps stage runs: 'cast on x, length -> x_len', or 'nothing ...'."""
    items = [f"{f.type} -> {f.to_name}" for f in config.secondary_features]
    items += [f"{s.type} on {s.tensor}" for s in config.processing_steps]
    return ", ".join(items) if items else "nothing (no secondary features or processing steps)"


def what_to_change(config: LoaderConfig, stage: int) -> str:
    """The config settings that govern stage ``stage`` (an index into LABELS), and which way to move them."""
    if stage == 0:
        mix = f", num_mix_files (now {_setting(config.shuffling.num_mix_files)})" if config.shuffling.shuffle else ""
        return (f"num_parallel_reads (now {_setting(config.reading.num_parallel_reads)}){mix} and "
                f"num_read_buffer_bytes (now {config.reading.num_read_buffer_bytes:,}): read more files at once, in "
                "larger reads")
    if stage == 1:
        return (f"num_parallel_parses (now {_setting(config.reading.num_parallel_parses)}): parse more blocks at once, "
                "up to the cores; or read fewer features (primary_features)")
    if stage == 2:
        return (f"the secondary features and processing steps ({ran_by_steps(config)}): simplify or drop the "
                "costliest, or store their results in the data")
    batch = f"target_batch_size (now {config.target_batch_size:,})"
    if config.regroup is not None:
        return f"the {stages.of(config).name} settings ({config.regroup.json_path}) and {batch}"
    return f"padding (its shapes and batching policies) and {batch}: pad less, or bucket by length (bucketing)"


def stage_lines(config: LoaderConfig, cuts: list[Cut]) -> list[str]:
    """One line per stage (and what the steps stage runs), then the whole pipeline's total."""
    seconds = stage_seconds(cuts)
    lines = ["where the time goes (a stage's time = its cut's time minus the cut before's; share of their sum):"]
    for i, (label, cut, spent, share) in enumerate(zip(LABELS, cuts, seconds, shares(seconds))):
        noise = ""
        if i and cut.seconds < cuts[i - 1].seconds:
            noise = f" within noise (this cut ran {cuts[i - 1].seconds - cut.seconds:.3f} s faster than the one before)"
        rate = cut.count / cut.seconds if cut.seconds > 0 else float("nan")
        lines.append(f"  {label}: {spent:.3f} s {share:5.1f}%{noise} | cut: {cut.count} {cut.unit} in "
                     f"{cut.seconds:.3f} s, {rate:.1f} {cut.unit}/s")
        if i == 2:
            lines.append(f"    runs: {ran_by_steps(config)}")
    whole = cuts[-1]
    lines.append(f"whole pipeline: {whole.seconds:.3f} s for {whole.elements} batches, "
                 f"{per_batch_ms(whole):.3f} ms per batch")
    return lines


def per_batch_ms(whole: Cut) -> float:
    return 1000 * whole.seconds / whole.elements if whole.elements else float("nan")


def verdict(config: LoaderConfig, cuts: list[Cut], step_ms: float) -> list[str]:
    """Whether a model step of ``step_ms`` would wait for the input pipeline, and what to change first."""
    per_batch = per_batch_ms(cuts[-1])
    seconds = stage_seconds(cuts)
    largest = max(range(len(seconds)), key=seconds.__getitem__)
    share = shares(seconds)[largest]
    if not per_batch > step_ms:
        return [f"with --step-ms {step_ms:g}: not input-bound: a batch takes {per_batch:.3f} ms to make, a step "
                f"{step_ms:g} ms (the largest stage is {LABELS[largest]}, {share:.1f}%)"]
    return [f"with --step-ms {step_ms:g}: input-bound: a batch takes {per_batch:.3f} ms to make, a step {step_ms:g} "
            f"ms, so each step would wait about {per_batch - step_ms:.3f} ms for its batch",
            f"change first: {LABELS[largest]} ({share:.1f}% of the time): {what_to_change(config, largest)}"]


def report(config: LoaderConfig, cuts: list[Cut], rounds: int, *, seconds: float,
           step_ms: float | None = None) -> list[str]:
    """The lines ``bench --stages`` prints."""
    one, five, fifteen = os.getloadavg()
    lines = [f"config: {config.source}",
             f"loader: {config.type}, batch size {config.target_batch_size}, regroup: "
             f"{stages.of(config).name if config.regroup is not None else 'none'}",
             f"measured: each cut over one epoch of the {len(config.dataset.files)} data files (the last smaller "
             f"batch kept), its fastest of {rounds} round{'s' if rounds > 1 else ''} (up to {MAX_ROUNDS} within "
             f"--seconds {seconds:g}), the files read once before; each time includes its cut's start-up",
             f"load average: {one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min) on {os.cpu_count()} cores"]
    lines += stage_lines(config, cuts)
    if step_ms is not None:
        lines += verdict(config, cuts, step_ms)
    return lines


def run(path: str, *, seconds: float = 20.0, step_ms: float | None = None, out: TextIO | None = None,
        progress: TextIO | None = None, trust_plugins: bool = True) -> None:
    """Time the stages of the config at ``path`` and print the report to ``out`` (the rounds on ``progress``).
    ``trust_plugins``: as :func:`batchloaders.load_config` takes it."""
    config = epoch_config(load_config(path, trust_plugins=trust_plugins))
    cuts, rounds = run_cuts(config, seconds=seconds, progress=progress)
    if not cuts[-1].elements:
        raise BatchLoaderError(f"{config.source}: one epoch gave no batch: the data files hold no example to time")
    for line in report(config, cuts, rounds, seconds=seconds, step_ms=step_ms):
        print(line, file=out or sys.stdout)
