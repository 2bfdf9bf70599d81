"""Which part of the data one ``tf.distribute`` input pipeline reads, and its per-replica batch.

The rule (:func:`plan`), for ``n`` input pipelines over ``F`` data files:

- ``n`` is 1 (or no input context): not sharded.
- ``F >= n``: **by file**: pipeline ``i`` reads files ``i, i + n, i + 2n, ...`` (positions in the
  config's sorted file list) and nothing of the others.
- ``F < n``: **by record**: every pipeline reads every file and keeps record ``r`` of file ``f``
  when ``(f + r) % n == i``. The sequence loaders keep whole windows instead, window ``w`` of file
  ``f`` (the ``w``-th cut from the file in that epoch) when ``(f + w) % n == i``: a window is never cut.

Record sharding assigns by *where* a record is (file and position), not by *when* it arrives, and
the records are dropped as each file's blocks are read, before any shuffle: the shares are
disjoint and cover the data whatever order the files are shuffled and interleaved in, seeded or
not. Windows are drawn at random (lengths, and the start offset when shuffled), so every pipeline
must draw the same ones: the per-file seeds and the file order come from ``seed``, which record
sharding a sequence loader with random windows therefore needs (pipelines run in other processes,
where no shared random seed can be made up).
"""
from __future__ import annotations

import dataclasses
import logging

import tensorflow as tf

from batchloaders.errors import ConfigError, Problem
from batchloaders.config.accounting import record_counts
from batchloaders.config.kinds import kind
from batchloaders.read import global_order
from batchloaders.transform.graphs import as_written, masked
from batchloaders.core.model import LoaderConfig

log = logging.getLogger("batchloaders")

NONE, FILE, RECORD, POSITION = "none", "file", "record", "position"


@dataclasses.dataclass(frozen=True)
class Shard:
    """One input pipeline's share: ``rule`` (NONE, FILE, RECORD, or POSITION: its positions of a global shuffle's
    order, global_order.py) and the files it reads."""

    rule: str
    pipelines: int
    pipeline: int
    files: tuple[int, ...]  # positions in config.dataset.files

    def records_of(self, file: int, count: int) -> int:
        """How many of the ``count`` records of file ``file``, one of ``files``, this pipeline keeps
        (every one unless by record)."""
        if self.rule != RECORD:
            return count
        first = (self.pipeline - file) % self.pipelines  # the first record r with (file + r) % n == pipeline
        return max(0, -(-(count - first) // self.pipelines))


def plan(config: LoaderConfig, input_context) -> Shard:
    """The share of the input pipeline ``input_context`` names (see the module docstring); ConfigError
    when record sharding a sequence loader whose windows are random and ``seed`` is null."""
    files = len(config.dataset.files)
    if input_context is None or input_context.num_input_pipelines <= 1 or config.service is not None:
        # Under a tf.data service the service splits the data among its workers, and trainers that
        # share one job (job_name) get disjoint batches: sharding here too would shard each worker's
        # part again, by position in what that worker was handed (files lost and repeated, measured).
        return Shard(NONE, 1, 0, tuple(range(files)))
    pipelines, pipeline = input_context.num_input_pipelines, input_context.input_pipeline_id
    if global_order.enabled(config):  # each pipeline reads its positions of the epoch's order, by offset
        if config.seed is None:
            raise ConfigError(Problem(config.source, "$.args.seed", (
                f"found null with shuffle_scope global and {pipelines} input pipelines: each pipeline reads its "
                "positions of one permutation of the epoch, which every pipeline (in its own process) must draw "
                "from one seed; expected a seed (any integer)")))
        return Shard(POSITION, pipelines, pipeline, tuple(range(files)))
    if files >= pipelines:
        return Shard(FILE, pipelines, pipeline, tuple(range(pipeline, files, pipelines)))
    if config.seed is None and random_windows(config):
        raise ConfigError(Problem(config.source, "$.args.seed", (
            f"found null, but the dataset has {files} data file(s) for {pipelines} input pipelines, so each "
            f"pipeline reads every file and keeps 1 window in {pipelines}, and the windows are drawn at random ({_why_random(config)}): every pipeline "
            "must draw the same windows, from one seed; expected a seed (any integer), or at least "
            f"{pipelines} data files (each pipeline then reads its own)")))
    return Shard(RECORD, pipelines, pipeline, tuple(range(files)))


def plan_sources(config: LoaderConfig, input_context) -> tuple[Shard, ...]:
    """The share of each mixture source (``config.sources``, in order) for the input pipeline ``input_context``
    names: :func:`plan` of each source's config on its own; none for a config without sources.

    Args:
        config: a checked LoaderConfig, with the call's seed.
        input_context: the call's tf.distribute.InputContext, or None.

    Returns:
        One Shard a source.

    Raises:
        ConfigError: as :func:`plan` does, for a source that cannot be shared out.
    """
    return tuple(plan(config.of_source(spec), input_context) for spec in config.sources)


def files_handed_out(config: LoaderConfig) -> bool:
    """Whether a tf.data service in ``dynamic`` mode hands the file names out to its workers one at a time.
    They are then not shuffled: TensorFlow 2.21 gives every file to every worker when a shuffle of the
    names comes before an interleave of more than one file (measured: each record once per worker).
    The records are still shuffled in the shuffle buffer."""
    return config.service is not None and config.service.processing_mode == "dynamic"


def random_windows(config: LoaderConfig) -> bool:
    """Whether a sequence loader's windows depend on random draws: their lengths, or a shuffled start offset."""
    loader = kind(config.type)
    if not loader.sequence:
        return False
    offset = config.window.stride or config.window.max_window  # (stride: only where the kind concatenates records)
    return not config.window.fixed or (config.shuffling.shuffle and offset > 1)


def _why_random(config: LoaderConfig) -> str:
    if not config.window.fixed:
        return f"lengths {config.window.min_window}..{config.window.max_window}"
    return "a random start offset, shuffle being true"


def log_rule(config: LoaderConfig, shard: Shard) -> None:
    """Log :func:`summary` on the ``batchloaders`` logger, at INFO (once per ``input_fn`` call)."""
    log.info("%s", summary(config, shard))


def summary(config: LoaderConfig, shard: Shard) -> str:
    """The rule chosen for one input pipeline and why, in one line."""
    files, n, i = len(config.dataset.files), shard.pipelines, shard.pipeline
    if shard.rule == NONE and config.service is not None:
        return ("not sharded by input pipeline: the tf.data service splits the data among its workers "
                "(trainers sharing a job_name get disjoint batches)")
    if shard.rule == NONE:
        return "input pipeline 0 of 1: not sharded, reads every data file"
    if shard.rule == POSITION:
        return (f"input pipeline {i} of {n}: sharded by position (shuffle_scope global): reads the records at "
                f"positions g of the run's order with g % {n} == {i}, each at its offset")
    if shard.rule == FILE:
        positions = ", ".join(map(str, shard.files[:5])) + (", ..." if len(shard.files) > 5 else "")
        return (f"input pipeline {i} of {n}: sharded by file ({files} data files >= {n} input pipelines): "
                f"reads {len(shard.files)} file(s), positions {positions}")
    unit = f"{_unit(config)} {_unit(config)[0]}"
    return (f"input pipeline {i} of {n}: sharded by {unit.split()[0]} ({files} data files < {n} input pipelines): "
            f"reads every file and keeps {unit} of file f when (f + {unit[-1]}) % {n} == {i}")


def per_replica_batch_size(config: LoaderConfig, batch_size: int, input_context, *, from_params: bool) -> int:
    """The batch each replica gets of the global ``batch_size``; ConfigError unless the replicas share it evenly."""
    replicas = input_context.num_replicas_in_sync if input_context is not None else 1
    if replicas <= 1:
        return batch_size
    if batch_size % replicas:
        where = Problem("<params>", "$.batch_size", "") if from_params else Problem(
            config.source, "$.args.target_batch_size", "")
        below, above = batch_size // replicas * replicas, -(-batch_size // replicas) * replicas
        nearest = f"{below} or {above}" if below else f"{above}"
        raise ConfigError(dataclasses.replace(where, message=(
            f"found {batch_size}: under tf.distribute the global batch is split evenly among the {replicas} "
            f"replicas in sync, and {batch_size} is not a multiple of {replicas}; expected a multiple of "
            f"{replicas} (e.g. {nearest})")))
    return input_context.get_per_replica_batch_size(batch_size)


def replicas_in_sync(input_context) -> int:
    """The replicas in sync a tf.distribute input context feeds; 1 without one."""
    return input_context.num_replicas_in_sync if input_context is not None else 1


def keep_records(shard: Shard):
    """For ``sources.read_blocks(keep=...)``: a block ``{"serialized", "file", "record"}`` -> the records
    this pipeline keeps; None unless sharded by record."""
    if shard.rule != RECORD:
        return None

    def keep(block):
        owner = (tf.cast(block["file"], tf.int64) + block["record"]) % shard.pipelines
        return {k: masked(v, owner == shard.pipeline) for k, v in block.items()}
    return keep


def kept_any(block) -> tf.Tensor:
    """Whether a block :func:`keep_records` filtered still holds a record: empty blocks are dropped, so that
    a pass giving this pipeline nothing gives no element at all (see :func:`endless`)."""
    return tf.size(block["serialized"]) > 0


def keep_windows(element: dict, shard: Shard) -> dict:
    """A cut element of ``windows.stream`` with only the windows this pipeline keeps (unchanged unless by record).

    ``windows`` counts the file's windows up to and including the element's, so the element's
    own are numbered ``windows - size(lens)`` onwards."""
    if shard.rule != RECORD:
        return element
    count = tf.size(element["lens"], out_type=tf.int64)
    number = element["windows"] - count + tf.range(count)
    mine = (tf.cast(element["file"], tf.int64) + number) % shard.pipelines == shard.pipeline
    return {**element, "starts": masked(element["starts"], mine), "lens": masked(element["lens"], mine)}


def _unit(config: LoaderConfig) -> str:
    """What the loader shards: records (independent) or windows (the sequence loaders)."""
    return kind(config.type).example


def _empty_share(config: LoaderConfig, shard: Shard) -> str:
    unit = _unit(config)
    if shard.rule == FILE:
        why = (f"its data file(s) (positions {', '.join(map(str, shard.files))} of {len(config.dataset.files)}) "
               f"give no {unit}")
    else:
        why = f"the data gives fewer {unit}s than input pipelines, or none falls to this one"
    never = ("so with epochs null it would give no batch, ever" if config.epochs is None else
             "so it would give no batch while the other input pipelines give theirs")
    return (f"input pipeline {shard.pipeline} of {shard.pipelines} got no {unit} from a full pass over its share "
            f"of the data (sharded by {shard.rule}): {why}, {never}; expected more data, or fewer input pipelines")


def share_note(config: LoaderConfig, shard: Shard) -> str:
    """What to add to an error about a pass that gave nothing when this pipeline reads only its share (chunking's
    and segmenting's guards see one pipeline's pass, not the data's): "" unsharded."""
    if shard.rule == NONE:
        return ""
    unit = _unit(config)
    return (f"; or the share of this input pipeline held none: input pipeline {shard.pipeline} of {shard.pipelines} reads its "
            f"share of the data (sharded by {shard.rule}), which may hold no {unit}: expected more data, or fewer "
            "input pipelines")


def check_share(config: LoaderConfig, shard: Shard) -> None:
    """ConfigError now, before anything runs, when the manifest's record counts show that an independent
    pipeline's share is empty (:func:`endless` catches the rest while running, with epochs null). With finite
    epochs too: that pipeline would give no batch while the others give theirs, which no later step reports
    (what the other replicas then do depends on the strategy; not checked here)."""
    if shard.rule in (NONE, POSITION) or kind(config.type).sequence:
        return  # (by position, every pipeline gets positions while the run lasts: input_fn counts them)

    counts = record_counts(config.dataset.manifest, config.dataset.files)
    if counts is not None and not any(shard.records_of(i, counts[i]) for i in shard.files):
        raise ConfigError(Problem(config.source, "$.args.epochs", _empty_share(config, shard)))


def endless(repeated: tf.data.Dataset, config: LoaderConfig, shard: Shard) -> tf.data.Dataset:
    """``repeated`` (the passes repeated forever, epochs null) failing clearly if it ever ends.

    tf.data ends a repeat whose pass gives no element: a pipeline whose share holds nothing (its
    files are empty; fewer records or windows than pipelines) would otherwise end with Keras's raw
    "expected an infinite number of elements" FailedPreconditionError. Nothing is added per element.
    """
    if config.epochs is not None or shard.rule == NONE:
        return repeated
    message = f"{config.source}: $.args.epochs: {_empty_share(config, shard)}"

    def fail(_):
        check = tf.debugging.Assert(False, [message], summarize=1)
        with tf.control_dependencies([check]):
            return tf.nest.map_structure(lambda spec: tf.zeros([d or 0 for d in spec.shape], spec.dtype),
                                         repeated.element_spec)
    return repeated.concatenate(tf.data.Dataset.from_tensors(0).map(as_written(fail)))
