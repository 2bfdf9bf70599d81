"""Data files to records: file listing, sharding, shuffling, repeating, interleaved reading.

Today's tf.data equivalents of the spec's TF1 reading arguments:
``num_filenames_shuffle_buffer`` -> ``Dataset.shuffle`` of the file names,
``num_mix_files`` -> the interleave's cycle length, ``num_parallel_reads`` -> its
parallel calls (remote files; local files read ahead in threads of their own are
taken in parallel, local records one by one stay in one thread: the same order),
``sloppy_interleave`` -> ``deterministic=False``,
``num_interleave_out_buffer_elements`` -> a prefetch buffer per open file,
``num_interleave_in_buffer_elements`` -> file names prefetched ahead of the
interleave, ``num_read_buffer_bytes`` -> ``TFRecordDataset(buffer_size=...)``.

Every file is read on its own through ``integrity.Reader``, which checks its end.
"""
from __future__ import annotations

from typing import Callable

import tensorflow as tf
from tensorflow.python.data.ops import interleave_op

from batchloaders.read import determinism
from batchloaders.read import sharding
from batchloaders.errors import ConfigError, Problem
from batchloaders.transform.graphs import as_written
from batchloaders.transform.inline_map import inline_map
from batchloaders.config.datasets import quote_entries, shorten, url_scheme
from batchloaders.core.model import LoaderConfig

AUTOTUNE = tf.data.AUTOTUNE


def check_remote_files(config: LoaderConfig) -> None:
    """List entries with a URL scheme are checked here, where tf.io.gfile is available.

    Every entry is checked; the error quotes the first few that cannot be read, each
    with its line in the list file. A scheme TensorFlow has no file system for is tried once.
    """
    def first_line(error: tf.errors.OpError) -> str:  # TF messages can go on for pages
        lines = (error.message or "").strip().splitlines() or [type(error).__name__]
        return lines[0] if len(lines[0]) <= 200 else lines[0][:197] + "..."

    dataset = config.dataset
    lines = dataset.entry_lines if len(dataset.entry_lines) == len(dataset.files) else (None,) * len(dataset.files)
    bad, unsupported = [], set()
    for path, line in zip(dataset.files, lines):
        scheme = url_scheme(path)
        if scheme is None:
            continue
        quoted = (f"line {line}: " if line is not None else "") + shorten(path)
        if scheme in unsupported:
            bad.append(f"{quoted}: TensorFlow has no file system for scheme {scheme!r}")
            continue
        try:
            if tf.io.gfile.stat(path).is_directory:
                bad.append(f"{quoted} is a directory")
        except tf.errors.NotFoundError:
            bad.append(f"{quoted} does not exist")
        except tf.errors.UnimplementedError as e:
            if f"scheme '{scheme}'" in (e.message or ""):
                unsupported.add(scheme)
                bad.append(f"{quoted}: TensorFlow has no file system for scheme {scheme!r}")
            else:
                bad.append(f"{quoted} cannot be checked: {first_line(e)}")
        except tf.errors.OpError as e:
            bad.append(f"{quoted} cannot be checked: {first_line(e)}")
    if bad:
        expected = "expected every entry to name an existing regular file"
        if unsupported:
            expected += (" on a file system TensorFlow has (gs://, file://, ...; others may need a plugin "
                         "such as tensorflow-io)")
        raise ConfigError(Problem(config.source, "$.args.dataset.args.list_file",
                                  f"{dataset.list_file or 'the list file'} names data files that cannot be read: "
                                  f"{quote_entries(bad)}: {expected}", dataset.list_file_line))


def file_names(config: LoaderConfig, shard: "sharding.Shard", *, repeat: bool = True) -> tf.data.Dataset:
    """``{"file": name, "index": position in config.dataset.files}``, sharded and shuffled.

    Sharded by file when ``shard`` (this input pipeline's, sharding.plan) says so (sharded by record, every
    pipeline reads every file).
    ``repeat=False`` leaves repeating to ``repeat_epochs``.
    """
    names = list(config.dataset.files)
    # int64, as every number the per-file scans give out (an int32 one keeps a scan off local_scan's runtime).
    files = tf.data.Dataset.from_tensor_slices({"file": names, "index": tf.range(len(names), dtype=tf.int64)})
    if shard.rule == sharding.FILE:
        files = files.shard(shard.pipelines, shard.pipeline)
    if config.shuffling.shuffle and not sharding.files_handed_out(config):  # each epoch's order: its own seed
        files = files.shuffle(config.shuffling.num_filenames_shuffle_buffer,
                              seed=determinism.seed(config.seed, determinism.FILES),
                              reshuffle_each_iteration=determinism.reshuffles())
    if repeat:
        files = files.repeat(config.epochs)
    if config.reading.num_interleave_in_buffer_elements > 1:
        files = files.prefetch(config.reading.num_interleave_in_buffer_elements)
    return files


def repeat_epochs(config: LoaderConfig, make: Callable[[], tf.data.Dataset], shard=None, *,
                  blocks: bool | None = None) -> tf.data.Dataset:
    """One whole epoch (file shuffle, reading, element shuffle) ``make()`` per epoch, so epochs never mix
    and each epoch's draws come from its number (determinism.py).

    Every element appears exactly once per epoch; only the batch that straddles
    two epochs holds elements of both. ``shard`` (a sharding.Shard): a sharded pipeline repeating
    forever fails clearly if its share holds nothing (sharding.endless). ``blocks``: whether ``make()``
    gives blocks of examples (True) or examples (False), for a pipeline that starts part-way through an
    epoch (a replay's restore); None: it never does.
    """
    skip = None
    if blocks is not None:
        def skip(dataset, count):  # the rest of an epoch: rebatching after it makes the same batches
            return dataset.unbatch().skip(count).batch(MAX_RECORDS_PER_BLOCK) if blocks else dataset.skip(count)
    # An empty endless pass ends determinism's epochs (see determinism.repeat_epochs); sharded, the
    # pipeline then fails naming its share rather than with Keras's raw cardinality error.
    repeated = determinism.repeat_epochs(config.epochs, make, skip)
    return sharding.endless(repeated, config, shard) if shard is not None else repeated


# Block sizes (and the record-size sample they use) live in block_sizes.py, which imports no TensorFlow.
from batchloaders.read.block_sizes import (BLOCK_BYTES, MAX_RECORDS_PER_BLOCK, MIN_RECORDS_PER_BLOCK,  # noqa: E402,F401
                                      sampled_record_bytes)
from batchloaders.read.block_sizes import independent as records_per_block  # noqa: E402


# What :func:`read_blocks` yields: blocks of records, single records, or compact blocks.
BLOCKS, RECORDS, COMPACT = "blocks", "records", "compact"


def read_blocks(config: LoaderConfig, reader, files: tf.data.Dataset, *, form: str = BLOCKS, then=None,
                keep=None) -> tf.data.Dataset:
    """Every record of ``files`` as ``{"serialized", "file", "record"}``, in the order ``interleave`` gives.

    ``file`` and ``record`` (the file's index and the record's number in it) name the record in parse
    errors. Each file is read on its own so that ``reader`` can check where it ends. Elements are
    blocks of records (``form`` BLOCKS), single records (RECORDS, for shuffling records), or (COMPACT)
    blocks ``{"serialized", "file", "first"}`` (scalars: the file's index and the number of the block's
    first record); ``then`` must then keep the block's records along the first axis of every output.
    ``then`` turns each block (after numbering) into what is yielded instead, in the thread that
    reads the file when :func:`reads_ahead` (so several files' blocks are worked on at once), in an
    inline map after the end-of-file check (inline_map.py), or, if ``then`` holds control flow, in the
    check's own call (a tf.data call through the inter-op pool costs more than a small function's
    work: docs/decisions/performance.md).
    ``keep`` (sharding.keep_records) selects records of each numbered block, in a map of its own:
    inside the check's scan, a block it empties would come out as a [1, 0] element, on whose
    ``unbatch`` TensorFlow 2.21 crashes (segmentation fault).

    Blocks (not single records) of every open file are read ahead, each file in a thread of its own,
    when at most ``READ_AHEAD_FILES`` files are open: handing over a block of up to 1024 records
    costs what one record would, so reading and the end-of-file checks overlap the rest of the
    pipeline even on local disk. ``num_interleave_out_buffer_elements`` counts records, as it
    always did: that many records' worth of blocks (at least one) are read ahead per file.
    """
    unbatch, compact = form == RECORDS, form == COMPACT
    block = records_per_block(config)
    ahead = -(-config.reading.num_interleave_out_buffer_elements // block)
    read_ahead = reads_ahead(config, unbatch=unbatch)

    def per_file(element):
        def numbered(b):
            if compact:
                out = {"serialized": b["serialized"], "file": element["index"], "first": b["first"]}
            else:
                count = tf.size(b["serialized"], out_type=tf.int64)
                out = {"serialized": b["serialized"], "file": tf.fill([count], element["index"]),
                       "record": b["first"] + tf.range(count)}
            return then(out) if then is not None else out
        blocks = None
        if compact and then is not None:
            # Parsed in the file's own thread without a hand-over to the inter-op pool per block
            # (inline_map.py); a ``then`` holding control flow is run in the end-of-file check's call instead.
            blocks = inline_map(reader.blocks(element["file"], element["index"], block), numbered)
        if blocks is None:
            blocks = reader.blocks(element["file"], element["index"], block, then=numbered,
                                   by_record=compact and then is not None)
        if keep is not None:
            blocks = blocks.map(as_written(keep)).filter(as_written(sharding.kept_any))
        if read_ahead:
            return blocks.prefetch(ahead)
        return blocks.unbatch() if unbatch else blocks

    # Single records (``unbatch``) are buffered per file as before: num_interleave_out_buffer_elements > 1.
    return interleave(config, files, per_file, buffered=not unbatch, read_ahead=read_ahead)


def reads_ahead(config: LoaderConfig, *, unbatch: bool = False) -> bool:
    """Whether :func:`read_blocks` reads every open file's blocks ahead in a thread of the file's own."""
    return not unbatch and _cycle(config) <= READ_AHEAD_FILES


def parses_where_read(config: LoaderConfig) -> bool:
    """Whether blocks are parsed in the thread that reads (ahead) their file (see :func:`read_blocks`),
    rather than in a map stage of ``num_parallel_parses`` threads: when the files open at once give at
    least the parallelism asked for. AUTOTUNE keeps the map stage, which it can widen to the cores."""
    wanted = config.reading.num_parallel_parses
    return reads_ahead(config) and wanted is not None and wanted <= _cycle(config)


# More open files than this read in the interleave's thread: a thread and a block in memory per
# open file (blocks are up to 8 MiB) would grow with num_parallel_reads up to 1024.
READ_AHEAD_FILES = 64


def reads_in_blocks(config: LoaderConfig) -> bool:
    """Whether records may stay in blocks up to batching: unshuffled (several files then alternate
    block by block). Shuffled records go one by one through the interleave and the shuffle buffer."""
    return not config.shuffling.shuffle


def _cycle(config: LoaderConfig) -> int:
    return config.shuffling.num_mix_files if config.shuffling.shuffle else (config.reading.num_parallel_reads or 1)


def interleave(config: LoaderConfig, files: tf.data.Dataset,
               per_file: Callable[[dict], tf.data.Dataset], *, buffered: bool = False,
               read_ahead: bool = False) -> tf.data.Dataset:
    """Read several files at once; unshuffled loaders read files in order unless num_parallel_reads > 1.

    ``per_file`` gets one element of :func:`file_names` (``{"file", "index"}``); ``buffered``: it
    buffers its elements itself (else ``num_interleave_out_buffer_elements`` > 1 elements are prefetched per
    file); ``read_ahead``: it reads ahead in a thread of the file's own (:func:`reads_ahead`), and the
    interleave takes its elements in parallel (the same order unless ``sloppy_interleave``).
    """
    cycle = _cycle(config)
    out_buffer = config.reading.num_interleave_out_buffer_elements

    def open_file(element):
        ds = per_file(element)
        return ds.prefetch(out_buffer) if out_buffer > 1 and not buffered else ds

    if cycle == 1:
        return files.flat_map(as_written(open_file))
    remote = reads_wait_on_io(config)
    if not remote and not read_ahead:
        # Same order as the parallel interleave, without handing every record to another thread:
        # on local disk that hand-over cost more than the reads it overlapped (docs/decisions/performance.md).
        return files.interleave(as_written(open_file), cycle_length=cycle, block_length=1)
    if not remote:
        # Files read ahead in threads of their own hand over whole blocks: the parallel interleave takes them
        # at less cost per block than the one-thread interleave, and opens the next file before one ends. Its
        # defaults (8 files opened ahead, 3 blocks buffered per file) cost start-up and memory for no
        # measured gain here (docs/decisions/performance.md).
        return interleave_op._ParallelInterleaveDataset(  # noqa: SLF001 - Dataset.interleave cannot set both
            files, as_written(open_file), cycle, 1, cycle, buffer_output_elements=1, prefetch_input_elements=1,
            deterministic=not config.reading.sloppy_interleave)
    parallel = config.reading.num_parallel_reads or AUTOTUNE
    if parallel != AUTOTUNE:
        parallel = min(parallel, cycle)
    return files.interleave(as_written(open_file), cycle_length=cycle, block_length=1, num_parallel_calls=parallel,
                            deterministic=not config.reading.sloppy_interleave)


def reads_wait_on_io(config: LoaderConfig) -> bool:
    """Whether reading threads pay off: some data file is remote (a URL), so reads wait on the network."""
    return any(url_scheme(path) is not None for path in config.dataset.files)


def options(config: LoaderConfig) -> tf.data.Options:
    """tf.data options of the whole pipeline.

    tf.data's default graph rewrites are off: none of them sped these pipelines up, and they
    cost start-up time whenever an iterator is made (each Keras epoch). Autotuning is off when
    the config leaves nothing to tune (every parallelism and the prefetch given as numbers,
    reads parallel only for remote files): its per-element bookkeeping then only costs CPU
    (docs/decisions/performance.md). ``Dataset.with_options`` on the result overrides both.

    A checkpoint of the iterator ignores state outside it: the end-of-file check reads a damaged
    file's tail again and probes files in nested datasets that keep nothing between calls, which
    tf.data otherwise refuses to save ("DatasetToSingleElement is stateful"); the counters of
    skip_file, chunking and segmenting are tables outside the iterator by design.
    """
    out = tf.data.Options()
    out.experimental_optimization.apply_default_optimizations = False
    out.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    tuned = (config.reading.num_parallel_parses is None or config.reading.num_prefetch is None
             or (config.reading.num_parallel_reads is None and reads_wait_on_io(config)))
    if not tuned:
        out.autotune.enabled = False
    return out
