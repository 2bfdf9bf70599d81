"""Several sources mixed into one stream of examples (``args.sources``).

Each source is read by the config's loader as a config of its own dataset and primary features would be
(its own files, shard, shuffle and epochs, its draws from the run's seed and its index), and its blocks are
decoded there: the sources' manifests may differ, their tensors may not (the config check's rule). The
mixed stream is then drawn from them:

* ``mixing.batches: mixed``: example by example, each from a source drawn by weight, then cut into blocks
  of the size the regroup stage asks for (padded, then trimmed to the block's longest example, as one
  source's blocks are). When every source parses alike (the independent loader; the same stored
  features under the same model names: :func:`parses_alike`), the serialized records are drawn instead,
  and each block is parsed once, as one source's are: a record is handed over without being copied,
  where a parsed example is copied twice (out of its block, into the mixed one);
* ``per_source``: block by block, each whole from one source.

The source of each draw is a stateless draw from the run's seed and the draw's number: the same seed
gives the same mixed order in every process and after a restore. ``mixing.exhausted`` says what a
source running out does (``choose_from_datasets`` skips an exhausted source, or stops at it). Under
``continue`` a source's draws stop at its examples as the manifests' counts or its files' sizes bound
them (:func:`budgets`, :func:`_planned`): a source left running at a tiny weight is not found by drawing
the spent ones again and again.
Every example carries its source's index and name in ``extras`` (the ``mixture_source`` secondary
feature reads them).
"""
from __future__ import annotations

import dataclasses
import math
import sys

import numpy as np
import tensorflow as tf

from batchloaders.config.accounting import examples_in_run, most_examples, record_counts
from batchloaders.loaders import base
from batchloaders.read import block_sizes, determinism, naming, origins
from batchloaders.read.parsing import parse_batch
from batchloaders.read.sharding import Shard
from batchloaders.core.model import LoaderConfig
from batchloaders.transform.graphs import as_written
from batchloaders.transform.secondary.mixture_source import SOURCE_INDEX, SOURCE_NAME

DRAWS_PER_STEP = 1024  # sources drawn per vectorized call
# Below this share of the weight held by the sources still running, their draws are made among them alone
# (above it, the spent sources' draws are left out: as cheap, and the order of a mix without counts).
KEPT_SHARE = 1 / 16
UNLIMITED = 2**62  # a source the manifests' counts do not bound
RECORD_BITS = 40  # a drawn record is one int64: its file's place among every source's files, then its number
# mixing.batches modes built in a module of their own: name -> source(loader, mix, block, readers, finish), as
# :func:`source` (filled where the loaders are registered: loaders/__init__.py).
MODES: dict = {}


def shares(config: LoaderConfig) -> list[float]:
    """Each source's expected share of the examples drawn (weights normalized)."""
    total = sum(s.weight for s in config.sources)
    return [s.weight / total for s in config.sources]


def source_configs(config: LoaderConfig) -> list[LoaderConfig]:
    """The config of each source on its own (mixed batches: keeping its last, short block); under ``exhausted:
    repeat`` every source but the one that lasts longest at its weight repeats without end (the run ends when
    that one runs out)."""
    subs = [config.of_source(s) for s in config.sources]
    if config.mixing.batches == "mixed":  # a source's last, short block is drawn from too: the mix ends the batches
        subs = [dataclasses.replace(sub, drop_remainder=False) for sub in subs]
    if config.mixing.exhausted != "repeat" or config.epochs is None:
        return subs
    longest = int(np.argmax([sum(record_counts(s.dataset.manifest, s.dataset.files)) / share
                             for s, share in zip(config.sources, shares(config))]))
    return [sub if i == longest else dataclasses.replace(sub, epochs=None) for i, sub in enumerate(subs)]


@dataclasses.dataclass(frozen=True)
class MixturePlan:
    """One call's mixture, worked out once and handed whole to what reads it.

    Attributes:
        config: the mixed config (the call's, as the regroup stage's source_plan changes it).
        subs: each source's config on its own (:func:`source_configs`), in ``config.sources`` order.
        shards: each source's share of the data for this input pipeline (sharding.plan_sources).
    """

    config: LoaderConfig
    subs: tuple[LoaderConfig, ...]
    shards: tuple[Shard, ...]


def plan(config: LoaderConfig, shards: tuple[Shard, ...]) -> MixturePlan:
    """The mixture a call reads.

    Args:
        config: a checked mixture config.
        shards: each source's share (input_fn.CallPlan.shards). A share depends on a source's files, seed,
            shuffle and windows, never on the epochs or drop_remainder a stage or :func:`source_configs` changes.

    Returns:
        The MixturePlan of ``config``'s sources.
    """
    return MixturePlan(config, tuple(source_configs(config)), tuple(shards))


def examples_per_source(mix: MixturePlan) -> list[int] | None:
    """Each source's examples over the run in this input pipeline's share, when every record is read once per
    epoch (``exhausted: continue``, finite epochs) and the manifests count them; else None."""
    if mix.config.mixing.exhausted != "continue" or mix.config.epochs is None:
        return None
    out = []
    for sub, shard in zip(mix.subs, mix.shards):
        count = examples_in_run(sub, list(shard.files), share=shard.records_of)
        if count is None:
            return None
        out.append(count)
    return out


def batches(mix: MixturePlan, stage, batch_size: int) -> int | None:
    """The run's batches when they are known: every record read once (:func:`examples_per_source`) and batches cut
    from the examples as they come (no regroup stage): mixed, the examples of all sources in batches; per
    source, each source's examples in batches of their own.

    Args:
        mix: the call's MixturePlan.
        stage: the config's regroup stage.
        batch_size: the call's batch size, per input pipeline.

    Returns:
        The count, or None when the manifests' counts do not fix it.
    """
    config = mix.config
    counts = examples_per_source(mix)
    if counts is None or not stage.example_wise:
        return None
    if config.mixing.batches == "per_source":
        return sum(stage.batches(config, n, batch_size) for n in counts)
    return stage.batches(config, sum(counts), batch_size)


def _labelled(parsed: dict, index: int, name: str, files_before: int) -> dict:
    """A decoded block with its source in ``extras``, one entry per example; where each example was read,
    when a stage asks, counts the files of every source (origins.data_files)."""
    first = tf.nest.flatten(parsed["values"])[0]
    count = tf.shape(first)[:1]
    extras = dict(parsed.get("extras", {}))
    if origins.FILE in extras:
        extras[origins.FILE] = extras[origins.FILE] + files_before
    extras[SOURCE_INDEX] = tf.fill(count, tf.constant(index, tf.int64))
    extras[SOURCE_NAME] = tf.fill(count, tf.constant(name))
    return {"values": dict(parsed["values"]), "lengths": dict(parsed.get("lengths", {})), "extras": extras}


def budgets(mix: MixturePlan, readers=None) -> list[int | None] | None:
    """How many elements each source gives this input pipeline at most, under ``exhausted: continue``.

    By the manifests' counts (exactly, for examples and records, where they fix them), or by the sizes of the
    files a manifest lists no count for (accounting.most_examples).

    Args:
        mix: the call's MixturePlan.
        readers: each source's integrity.Reader (its files' sizes), or None.

    Returns:
        One bound a source (None where nothing bounds it), or None when no source runs out before the run
        ends (endless epochs) or the first one to run out ends it.
    """
    if mix.config.mixing.exhausted != "continue" or mix.config.epochs is None:
        return None
    exact = examples_per_source(mix)
    if exact is not None:
        return list(exact)
    return [most_examples(sub, list(shard.files), readers[i].table.sizes if readers is not None else None)
            for i, (sub, shard) in enumerate(zip(mix.subs, mix.shards))]


def _choices(mix: MixturePlan, readers=None) -> tf.data.Dataset:
    """The source of every draw, from the run's seed and the draw's number: never ending, or, where
    :func:`budgets` bounds the sources (``readers``: their files' sizes), drawn among the sources still running
    (:func:`_planned`)."""
    config, limits = mix.config, budgets(mix, readers)
    seed = determinism.seed(config.seed, determinism.MIXING)
    if seed is None:  # built outside input_fn without a seed: a fresh order
        seed = tf.random.uniform([], maxval=determinism.MAX_SEED, dtype=tf.int64)
    fractions = shares(config)
    share = tf.constant(fractions, tf.float64)
    # A share below float64's normal range (5e-324 of 2) is still drawn: its logit from the weight itself,
    # worked out here, since TensorFlow reads such a number as 0.
    total = sum(s.weight for s in config.sources)
    logits = tf.where([f >= sys.float_info.min for f in fractions], tf.math.log(share),
                      tf.constant([math.log(s.weight) - math.log(total) for s in config.sources], tf.float64))
    if limits is not None:
        return _planned(logits, share, limits, seed)

    def draw(step):
        picked = tf.random.stateless_categorical(logits[None], DRAWS_PER_STEP, seed=tf.stack([seed, step]),
                                                 dtype=tf.int64)
        return tf.reshape(picked, [-1])
    return tf.data.Dataset.counter().map(as_written(draw)).unbatch()


def _planned(logits, share, limits: list[int | None], seed) -> tf.data.Dataset:
    """The draws of ``exhausted: continue`` with each source's ``limits`` (:func:`budgets`): a source's draws
    past its limit and one more (which finds its end) are not made, so no weight, however small, leaves the
    sources still running to be found by drawing the spent ones again and again.

    While the sources still running hold at least KEPT_SHARE of the weight, the draws are those of the endless
    stream with the spent sources' left out (the order a mix without limits gives); below, they are drawn among
    the running sources alone, their weights renormalized. A source without a limit (None) is never spent: it
    is found spent by drawing it. The draws end when every source is spent, and the mix with them: a restored
    choose_from_datasets counts the sources it had found spent before the save as running still, and would
    otherwise draw on for ever once the last one runs out."""
    count = len(limits)
    left0 = tf.constant([UNLIMITED if n is None else n + 1 for n in limits], tf.int64)

    def step(left, number):
        running = left > 0
        kept = tf.reduce_sum(tf.where(running, share, tf.zeros_like(share)))
        every = (kept >= KEPT_SHARE) | ~tf.reduce_any(running)  # (nothing running: the step is not used)
        drawn = tf.where(every | running, logits, tf.constant(-np.inf, tf.float64))
        picked = tf.random.stateless_categorical(drawn[None], DRAWS_PER_STEP, seed=tf.stack([seed, number]),
                                                 dtype=tf.int64)[0]
        hits = tf.one_hot(picked, count, dtype=tf.int64)
        nth = tf.reduce_sum(tf.cumsum(hits, axis=0) * hits, axis=1)  # 1 for a source's first draw in this step
        made = tf.boolean_mask(picked, nth <= tf.gather(left, picked))
        return tf.maximum(left - tf.reduce_sum(hits, axis=0), 0), (made, tf.reduce_any(running))

    return (tf.data.Dataset.counter().scan(left0, as_written(step))
            .take_while(as_written(lambda made, running: running))
            .map(as_written(lambda made, running: made)).unbatch())


def _trimmed(block: dict) -> dict:
    """A block cut to its longest example along each measured axis: padded_batch pads to the longest block an
    example came from, a single source's block to the longest example."""
    values = dict(block["values"])
    for name, lengths in block["lengths"].items():
        values[name] = values[name][:, :tf.reduce_max(tf.concat([lengths, [0]], 0))]
    return {**block, "values": values}


def source(loader, mix: MixturePlan, block: int, readers, finish=None) -> tuple[tf.data.Dataset, object]:
    """The mixed stream of a call, for the regroup stage (see the module's text).

    Args:
        loader: the config's registered Loader, which reads every source.
        mix: the call's MixturePlan.
        block: examples per block.
        readers: each source's integrity.Reader.
        finish: base.finisher's function (examples made into the model's tensors one by one), or None.

    Returns:
        (the mixed blocks of examples, decoded; identity); with ``finish`` and whole batches from one source,
        each source's blocks finished where they are decoded: (the mixed batches, None).
    """
    config = mix.config
    if config.mixing.batches in MODES:
        return MODES[config.mixing.batches](loader, mix, block, readers, finish)
    stop = config.mixing.exhausted != "continue"
    if finish is not None and config.mixing.batches == "per_source":
        return tf.data.Dataset.choose_from_datasets(_finished_streams(loader, mix, block, readers, finish),
                                                    _choices(mix, readers), stop_on_empty_dataset=stop), None
    if config.mixing.batches == "mixed" and parses_alike(loader, config):
        return _drawn_records(loader, mix, block, readers)
    streams, files_before = [], 0
    for spec, elements, decode in _each_source(loader, mix, block, readers):
        streams.append(elements.map(as_written(lambda e, decode=decode, i=spec.index, n=spec.name, f=files_before:
                                               _labelled(decode(e), i, n, f)),
                                    num_parallel_calls=config.reading.num_parallel_parses or tf.data.AUTOTUNE,
                                    deterministic=True))
        files_before += len(spec.dataset.files)
    if config.mixing.batches == "per_source":
        return tf.data.Dataset.choose_from_datasets(streams, _choices(mix, readers), stop_on_empty_dataset=stop), _same
    examples = tf.data.Dataset.choose_from_datasets([s.unbatch() for s in streams], _choices(mix, readers),
                                                    stop_on_empty_dataset=stop)
    return examples.padded_batch(block, drop_remainder=_drops(config)).map(as_written(_trimmed)), _same


def _drops(config: LoaderConfig) -> bool:
    """Whether the mixed stream's last, short block is dropped (an endless run has none to keep)."""
    return config.drop_remainder or config.epochs is None


def parses_alike(loader, config: LoaderConfig) -> bool:
    """Whether the sources' records can be drawn before parsing: the loader reads one example per record
    (``records``), every source stores the model's features alike (the same stored names, dtypes, shapes
    and encodings, in manifests that all or none allow feature lists), and a record's number can name its
    file (fewer than 2**23 files in all)."""
    if not loader.reads_records or sum(len(s.dataset.files) for s in config.sources) >= 2**(63 - RECORD_BITS):
        return False  # (more files than a drawn record's number can name)
    first = config.of_source(config.sources[0])
    return all(sub.selected == first.selected
               and sub.dataset.manifest.allow_var_len == first.dataset.manifest.allow_var_len
               for sub in (config.of_source(s) for s in config.sources[1:]))


def _drawn_records(loader, mix: MixturePlan, block: int, readers):
    """(blocks of the mixed stream's serialized records, the function parsing one): :func:`source` for
    sources that parse alike. Each record carries one number beside it, its file's place among every
    source's files and its own place in the file, so that a parse error names both."""
    config = mix.config
    streams, files_before, owners = [], 0, []
    for spec, sub, shard, reader in zip(config.sources, mix.subs, mix.shards, readers):
        with determinism.for_source(spec.index):
            # In blocks as its files are read (up to 1,024 records, fewer when records are large): a map
            # call per block of the batch's size cost as much as the drawing (docs/decisions/performance.md).
            blocks, _ = loader.records(sub, shard, max(block, block_sizes.independent(sub)), reader)

        def numbered(b, offset=files_before):
            return {"serialized": b["serialized"], "where": (b["file"] + offset) * 2**RECORD_BITS + b["record"]}
        streams.append(blocks.map(as_written(numbered)).unbatch())
        files_before += len(spec.dataset.files)
        owners.extend([spec.index] * len(spec.dataset.files))
    drawn = tf.data.Dataset.choose_from_datasets(streams, _choices(mix, readers),
                                                 stop_on_empty_dataset=config.mixing.exhausted != "continue")
    parser = _record_parser(config, origins.data_files(config), tuple(owners))
    return drawn.batch(block, drop_remainder=_drops(config)), parser


def _record_parser(config: LoaderConfig, files: tuple[str, ...], owners: tuple[int, ...]):
    """The function parsing a block of drawn records (every source's features are stored alike); ``files``
    every source's data files (origins.data_files), ``owners`` the source of each."""
    first = config.of_source(config.sources[0])
    manifest, selected, source_names = first.dataset.manifest, first.selected, [s.name for s in config.sources]
    manifests = [s.dataset.manifest.path for s in config.sources]  # (a range error names the record's own)

    def parse(records):
        file, record = records["where"] // 2**RECORD_BITS, records["where"] % 2**RECORD_BITS
        index = tf.gather(tf.constant(owners, tf.int64), file)
        values, lengths = parse_batch(records["serialized"], manifest, selected,
                                      names=naming.record_names(files, file, record),
                                      manifest_paths=tf.gather(tf.constant(manifests), index))
        extras = origins.extras(config, file, record) if origins.wanted(config) else {}
        extras.update({SOURCE_INDEX: index, SOURCE_NAME: tf.gather(tf.constant(source_names), index)})
        return {"values": values, "lengths": lengths, "extras": extras}
    return parse


def _each_source(loader, mix: MixturePlan, block: int, readers, finish=None):
    """(spec, elements, decode) of each source, read as its own config would be (base.source), in this input
    pipeline's share and with its own draws from the run's seed."""
    for spec, sub, shard, reader in zip(mix.config.sources, mix.subs, mix.shards, readers):
        with determinism.for_source(spec.index):
            elements, decode = base.source(loader, sub, shard, block, reader, finish)
        yield spec, elements, decode


def _finished_streams(loader, mix: MixturePlan, block: int, readers, finish) -> list:
    """Each source's blocks made into the model's tensors: by its loader where it parses them (as one source's
    are), else in one map after decoding. Nothing reads the source's index then (no secondary feature)."""
    streams = []
    config = mix.config
    for _, elements, decode in _each_source(loader, mix, block, readers, finish):
        if decode is not None:
            elements = elements.map(as_written(lambda e, decode=decode: finish(decode(e))),
                                    num_parallel_calls=config.reading.num_parallel_parses or tf.data.AUTOTUNE,
                                    deterministic=True)
        streams.append(elements)
    return streams


def _same(element):
    return element
