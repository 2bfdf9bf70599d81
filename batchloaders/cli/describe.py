"""``batchloaders describe CONFIG``: what a config compiles to, read from the checked config alone.

Prints the loader type, the data files and their record counts, the steps per epoch when the
manifest fixes them, the reading settings, every output tensor's dtype and per-example shape,
the secondary features and steps, the padding of each tensor, which parsing path the compiler
takes and why, and the output signature (each batch's tensors, batch axis first)::

    $ batchloaders describe configs/chars_independent.yaml
    config: configs/chars_independent.yaml
    loader: independent
    data files: 4 (dir dataset of the files matching **/*{.tfrecords,.tfrecord,.tfrec,-[0-9]...}{,.gz,.zz}; manifest .../demo_data/chars/__manifest__.json)
    ...
    tensor context: int32 [16] (model input)
    tensor next_char: int32 [] (model target)
    padding: none
    parsing: vectorized: records are batched while serialized and parsed with one ...
    output signature (each batch, batch axis first; ? = known only when the batch is made):
      name       role    dtype  shape     kind
      context    input   int32  [64, 16]  dense
      next_char  target  int32  [64]      dense

``describe --json`` prints :func:`plan`: the same as one JSON object. Nothing is read from the
data files (but the 8-byte length of a few first records, as the discrete loader sizes its
blocks), no dataset is built and, for built-in types, TensorFlow is not imported.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import TextIO

from batchloaders.read import positional  # no TensorFlow there
from batchloaders.read.block_sizes import discrete_slots_fixed, sequence_records_per_block  # no TensorFlow there
from batchloaders.transform.registry import BUILTIN, SECONDARY, STEPS
from batchloaders.config.accounting import examples_in_run, record_counts
from batchloaders.config.config import load_config
from batchloaders.config.kinds import kind
from batchloaders.core.model import LoaderConfig, Step, TensorInfo, format_shape
from batchloaders.config.order import after_chunking, run_order
from batchloaders.config.strata import per_batch, schedule
from batchloaders.config.schema import schema_text
from batchloaders.core.values import default_value
from batchloaders.regroup import stage as stages  # no TensorFlow there

VECTORIZED = ("vectorized: records are batched while serialized and parsed with one "
              "parse_example/parse_sequence_example call per batch; secondary features, steps and padding "
              "run on whole batches")
def _schema_words(schema: str, key: str) -> str:
    """The schema's description of ``key``, without its "Defaults to" sentence: describe says what the
    reference and the editor say."""
    text = json.loads(schema_text(schema))["properties"][key]["description"]
    return text.split(" Defaults to")[0]


MULTI_LOAD = _schema_words("independent_args.schema.json", "multi_load")


def parse_call(config: LoaderConfig) -> str:
    """The one tf.io call that parses a batch (or block) of this dataset's records."""
    if config.dataset.manifest.allow_var_len:
        return ("tf.io.parse_sequence_example call, because the manifest allows variable-length feature lists "
                "(records are SequenceExamples)")
    if any(f.var_len for f in config.selected.values()):
        return ("tf.io.parse_example call, because the manifest has no feature lists (records are Examples); "
                "variable-length features are read as ragged value lists and padded to the longest of the call")
    return "tf.io.parse_example call, because the manifest has fixed-length features only (records are Examples)"


def _steps_per_record(config: LoaderConfig) -> str:
    steps = next(iter(config.selected.values())).steps_per_record
    return "feature lists of varying length per record" if steps is None else f"{steps} steps per record"


def _shuffled_batches(config: LoaderConfig, what: str, one_shape: bool) -> str:
    if not config.shuffling.shuffle and one_shape:
        return f"of one shape, cut into batches by rebatch a block of {what} at a time"
    if config.shuffling.shuffle and config.shuffling.scope == "global":
        return f"read in a global order of all {what} (see reading), batched as they come"
    shuffle = (f"shuffled in a buffer of {config.shuffling.num_shuffle_buffer_elements} {what}, then "
               if config.shuffling.shuffle else "")
    return f"{shuffle}batched with padded_batch"


def parsing_path(config: LoaderConfig) -> str:
    """Which parsing path the config compiles to and why, as one line."""
    loader = kind(config.type)
    if not loader.sequence:
        return f"{VECTORIZED}; here: one {parse_call(config)}"
    call = parse_call(config)
    per_block = sequence_records_per_block(config)
    one_length = config.window.fixed
    if loader.concatenates_records:
        return (f"vectorized in blocks: each file is read in blocks of {per_block} records; each block is "
                f"parsed with one {call}, and flattened along the first axis into steps "
                f"({_steps_per_record(config)}); a Dataset.scan per file cuts window positions, carrying the "
                "unconsumed steps from block to block; the windows of a block are gathered with one tf.gather "
                f"per feature; windows are {_shuffled_batches(config, 'windows', one_length)}; secondary features, "
                "steps and padding run on whole batches")
    return (f"vectorized in blocks: each file's records are read in blocks of {per_block} and stay serialized "
            "while a Dataset.scan per file plans the windows (carrying the records of an unfinished window to "
            f"the next block); windows are {_shuffled_batches(config, 'windows', discrete_slots_fixed(config))}; "
            f"the records of each batch of windows are parsed with one {call}; feature lists are concatenated "
            "along their first axis per window and context features stacked one row per record; secondary "
            "features, steps and padding run on whole batches")


def windows_line(config: LoaderConfig) -> str | None:
    loader = kind(config.type)
    if not loader.sequence:
        return None
    unit = "steps" if loader.concatenates_records else "whole records"
    window = config.window
    size = (f"{window.min_window} {unit}" if window.fixed
            else f"{window.min_window}..{window.max_window} {unit} (drawn uniformly per window)")
    placement = f"starting every {window.stride} steps" if window.stride else "back to back"
    max_offset = window.stride or window.max_window  # (stride: only where the kind concatenates records)
    start = (f"; the first window of each file starts after a random offset of 0..{max_offset - 1} "
             f"{loader.window_unit}"
             if config.shuffling.shuffle and max_offset > 1 and config.shuffling.scope != "global"
             else "; the first window starts at the start of each file")
    return f"windows: {size}, {placement} within one file{start}"


def padded_axes(config: LoaderConfig, name: str) -> list[str]:
    """What padding does to the axes of output tensor ``name``; empty when it changes nothing."""
    if not config.padding:
        return []
    info, spec = config.tensors[name], config.pad_specs.get(name)
    if spec is not None and spec.batching != "padded":
        return []  # ragged, sparse, dense and batchers never pad
    target = spec.shape if spec is not None and spec.shape is not None else (-1,) * info.rank
    parts = []
    for axis, (want, dim) in enumerate(zip(target, info.shape)):
        if want == -1 and dim is None:
            parts.append(f"axis {axis} to the batch maximum")
        elif want != -1 and want != dim:
            parts.append(f"axis {axis} to {want}")
    return parts


POLICY_WORDS = {
    "dense": "dense: examples stacked as they are (one shape)",
    "ragged": "ragged: a tf.RaggedTensor, each row exactly one example",
    "sparse": "sparse: a tf.SparseTensor of the examples' entries, dense shape the batch maximum",
}


def padding_lines(config: LoaderConfig) -> list[str]:
    """One line per output tensor saying what finalize pads, to which length and with which value."""
    if not config.padding:
        return ["padding: none"]
    lines = ["padding: yes (per batch, after secondary features and steps)"]
    for name in config.outputs:
        info: TensorInfo = config.tensors[name]
        spec = config.pad_specs.get(name)
        value = spec.value if spec is not None and spec.value is not None else default_value(info.dtype)
        parts = padded_axes(config, name)
        if spec is not None and spec.batching != "padded":
            words = POLICY_WORDS.get(spec.batching, f"with the registered batcher {spec.batching!r}")
            lines.append(f"  batch {name}: {words}")
        elif parts:
            lines.append(f"  pad {name}: {', '.join(parts)}, with {value!r}")
        else:
            lines.append(f"  pad {name}: nothing to pad (fixed shape {format_shape(info.shape)})")
    return lines


def _in_windows(config: LoaderConfig, what: str) -> str:
    """reading_line's words for ``shuffle_window_files`` (none without it)."""
    window = config.shuffling.window_files
    if window is None:
        return ""
    return (f", cut into windows of {window} files (shuffle_window_files): the files permuted each epoch, each "
            f"window's {what}s permuted among themselves and read before the next window's")


def reading_line(config: LoaderConfig) -> str:
    if config.shuffling.shuffle and config.shuffling.scope == "global":
        what, files = kind(config.type).example, config.dataset.files
        records = "each record" if what == "record" else "each window's records"
        where = "each file's copy in the cache" if config.dataset.access.cache else "the files' record indexes"
        return (f"reading: {records} at their byte offsets ({where}), in one "
                f"permutation of all {what}s per epoch drawn from the seed and the epoch"
                f"{'' if config.seed is None else f' (seed {config.seed})'}{_in_windows(config, what)}; input "
                "pipeline k of N reads the positions g with g % N == k; random access: "
                f"{positional.describe(config.dataset.access, files)}")
    if config.shuffling.shuffle:
        examples = (f"; examples shuffled in a buffer of {config.shuffling.num_shuffle_buffer_elements}"
                    if not kind(config.type).sequence else "")  # the sequence loaders' windows: see parsing
        return (f"reading: {config.shuffling.num_mix_files} files at a time, file names shuffled in a buffer of "
                f"{config.shuffling.num_filenames_shuffle_buffer}{examples}"
                f"{'' if config.seed is None else f' (seed {config.seed})'}")
    parallel = config.reading.num_parallel_reads or 1
    return "reading: one file at a time, in order" if parallel == 1 else f"reading: {parallel} files at a time"


def interleave_line(config: LoaderConfig) -> str:
    """The interleave and pipeline settings, as set (sources.py decides how they are used)."""
    def auto(value) -> str:
        return "autotuned" if value is None else str(value)

    reading = config.reading
    order = "sloppy (files in whatever order is ready)" if reading.sloppy_interleave else "deterministic"
    buffered = reading.num_interleave_out_buffer_elements
    return (f"interleave: {order}; buffered per open file: {buffered} record{'' if buffered == 1 else 's'}; "
            f"file names ahead: {reading.num_interleave_in_buffer_elements}; read buffer per file: "
            f"{reading.num_read_buffer_bytes:,} bytes; parallel reads: {auto(reading.num_parallel_reads)}; parallel "
            f"parses: {auto(reading.num_parallel_parses)}; batches prefetched: {auto(reading.num_prefetch)}")


PER_FILE_SHOWN = 8  # record counts of the first files in the records line (--json lists every file's)


def records_line(config: LoaderConfig) -> str:
    """What the manifest's files[] says of the record count, and what follows from it."""
    counts = record_counts(config.dataset.manifest, config.dataset.files)
    if counts is None:
        listed = sum(config.dataset.manifest.entry(f) is not None for f in config.dataset.files)
        return (f"records: unknown ({listed} of {len(counts or config.dataset.files)} data files listed with "
                "num_records in the manifest; `batchloaders manifest DIR` records them)")
    shown = ", ".join(f"{n:,}" for n in counts[:PER_FILE_SHOWN]) + (", ..." if len(counts) > PER_FILE_SHOWN else "")
    line = f"records: {sum(counts):,} in {len(counts)} files (from the manifest's files; per file: {shown})"
    batches = total_batches(config)
    if batches is not None:
        line += f"; {batches:,} batches in {config.epochs} epoch(s), the dataset's cardinality"
    return line


_EXHAUSTED = {
    "continue": "a source that runs out is left out and the others drawn at their weights renormalized, so every "
                "record of every source is read once per epoch",
    "stop": "the run ends when the first source runs out",
    "repeat": "a source that runs out starts again, until the one that lasts longest at its weight runs out",
}


_HOW = {
    "mixed": "each example drawn from a source by weight (a batch mixes sources)",
    "per_source": "each batch drawn whole from one source, by weight",
    "stratified": "every batch holds each source's share of it by weight, a source's examples together (the rounding "
                  "carried from batch to batch)",
}
_STRATIFIED_ENDS = {
    "stop": "the run ends at the first batch a source cannot fill its share of",
    "repeat": "a source that runs out starts again, until the one that lasts longest at its weight cannot fill its "
              "share of a batch",
}


def sources_lines(config: LoaderConfig) -> list[str]:
    """A mixture: how it draws, then each source with its files, records, weight and expected share."""
    stratified = config.mixing.batches == "stratified"
    ends = ("every source repeats on its own (epochs null)" if config.epochs is None else
            (_STRATIFIED_ENDS if stratified else _EXHAUSTED).get(config.mixing.exhausted, ""))
    lines = [f"sources: {len(config.sources)}, {_HOW[config.mixing.batches]}; {ends}"]
    total = sum(s.weight for s in config.sources)
    counts_per_batch = _per_batch(config)
    for k, source in enumerate(config.sources):
        dataset = source.dataset
        counts = record_counts(dataset.manifest, dataset.files)
        records = f"{sum(counts):,} records" if counts is not None else "records unknown"
        share = source.weight / total
        unit = "batches" if config.mixing.batches == "per_source" else "examples"
        drawn = f"{share:.1%} of the {unit} drawn"
        if counts_per_batch is not None:
            least, most = counts_per_batch[k]
            each = f"{least:,}" if least == most else f"{least:,} or {most:,}"
            drawn = f"{share:.1%} of each batch: {each} of {config.target_batch_size:,}"
        lines.append(f"  source {source.name}: {len(dataset.files)} files ({dataset.manifest.path}), {records}, weight "
                     f"{source.weight:g}: {drawn}")
    if stratified:
        lines.append(f"  the per-batch counts repeat every {_period(config):,} batch(es), over which each source's "
                     "share is its weight's")
    batches = _mixture_batches(config)
    if batches is not None:
        lines.append(f"batches: {batches:,} in {config.epochs} epoch(s) (every record of every source once per epoch), "
                     "the dataset's cardinality")
    else:
        lines.append("batches: unknown (" + ("a source repeats, or the run stops at one" if config.epochs is not None
                                             and config.mixing.exhausted != "continue" else
                                             "the run repeats forever" if config.epochs is None else
                                             "known only with every source's record counts and batches cut as the "
                                             "examples come") + ")")
    return lines


def _per_batch(config: LoaderConfig) -> list[tuple[int, int]] | None:
    """Each source's (fewest, most) examples in a batch of ``batches: stratified``; None otherwise."""
    if config.mixing.batches != "stratified":
        return None
    return per_batch(tuple(s.weight for s in config.sources), config.target_batch_size)


def _period(config: LoaderConfig) -> int:
    """The batches after which a stratified mix's per-batch counts repeat (config/strata.py)."""
    return len(schedule(tuple(s.weight for s in config.sources), config.target_batch_size))


def _sources_json(config: LoaderConfig) -> list[dict] | None:
    """A mixture's sources (the dataset, files and records above are the first source's); None otherwise."""
    if not config.sources:
        return None
    total = sum(s.weight for s in config.sources)
    out = []
    for source in config.sources:
        counts = record_counts(source.dataset.manifest, source.dataset.files)
        out.append({"name": source.name, "manifest": source.dataset.manifest.path, "files": list(source.dataset.files),
                    "records": sum(counts) if counts is not None else None, "weight": source.weight,
                    "share": source.weight / total})
    counts_per_batch = _per_batch(config)
    if counts_per_batch is not None:  # stratified: each source's examples in a batch of target_batch_size
        for entry, (least, most) in zip(out, counts_per_batch):
            entry["per_batch"] = {"fewest": least, "most": most, "period": _period(config)}
    return out


def _mixture_batches(config: LoaderConfig) -> int | None:
    """A mixture's batches when known (loaders/mixture.py counts them the same way), without TensorFlow."""
    if config.epochs is None or config.mixing.exhausted != "continue" or not stages.of(config).example_wise:
        return None
    counts = [examples_in_run(config.of_source(s), list(range(len(s.dataset.files)))) for s in config.sources]
    if any(c is None for c in counts):
        return None
    stage = stages.of(config)
    if config.mixing.batches == "per_source":
        return sum(stage.batches(config, n, config.target_batch_size) for n in counts)
    return stage.batches(config, sum(counts), config.target_batch_size)


def integrity_line(config: LoaderConfig) -> str:
    if config.reading.on_corrupt == "skip_file":
        return ("on_corrupt: skip_file: a damaged file is skipped from the damage on, with a warning; "
                "input_fn.skipped() counts them")
    return "on_corrupt: fail: a damaged file stops the run with an error naming it, its byte offset and last good record"


def describe(config: LoaderConfig) -> list[str]:
    """The lines ``batchloaders describe`` prints for a checked config."""
    dataset = config.dataset
    epochs = "null = repeat forever" if config.epochs is None else str(config.epochs)
    lines = [
        f"config: {config.source}",
        f"loader: {config.type}",
        (f"data files: {sum(len(s.dataset.files) for s in config.sources)} in {len(config.sources)} sources (below)"
         if config.sources else
         f"data files: {len(dataset.files)} ({dataset.type} dataset"
         f"{' of the files matching ' + dataset.pattern if dataset.pattern else ''}"
         f"; manifest {dataset.manifest.path}"
         f"{'; ' + dataset.manifest.compression + ' compressed' if dataset.manifest.compression else ''})"),
        f"batch size: {config.target_batch_size} (drop_remainder {str(config.drop_remainder).lower()}; "
        f"epochs {epochs})",
        *(sources_lines(config) if config.sources else [records_line(config), steps_line(config)]),
        reading_line(config),
        interleave_line(config),
        integrity_line(config),
    ]
    window = windows_line(config)
    if window:
        lines.append(window)
    lines.append("tensors (per example, without the batch axis; ? = length varies between examples):")
    for name in config.outputs:
        info = config.tensors[name]
        role = "model input" if name in config.inputs else "model target"
        lines.append(f"  tensor {name}: {info.dtype} {format_shape(info.shape)} ({role})")
    lines.extend(transform_lines(config))
    lines.extend(padding_lines(config))
    lines.extend(stages.of(config).lines(config))
    lines.append(f"parsing: {parsing_path(config)}")
    lines.append(f"multi_load: {str(config.multi_load).lower()}: {MULTI_LOAD}")
    lines.append(batch_shapes_line(config))
    lines.extend(signature_lines(config))
    return lines


def transform_lines(config: LoaderConfig) -> list[str]:
    """Secondary features and steps in the order they run, each with what it makes."""
    order = run_order(config)
    if not order:
        return []
    lines = ["secondary features and steps, in the order they run:"]
    for item in order:
        if isinstance(item, Step):
            kind = STEPS.get(item.type)
            made = (f"{_info(item.input_info)} -> {_info(item.output_info)}")
            lines.append(f"  step {item.type} on {item.tensor}: {made}{_plugin(kind)}")
        else:
            kind = SECONDARY.get(item.type)
            lines.append(f"  secondary {item.to_name} = {item.type}: {_info(item.info)}{_plugin(kind)}")
    return lines


_info = stages.shown


def _plugin_origin(kind) -> str | None:
    """Where a plugin type was registered ("file: function f, line N"); None for a built-in type."""
    if kind is None or kind.scope == BUILTIN or not kind.origin:
        return None
    return kind.origin


def _plugin(kind) -> str:
    origin = _plugin_origin(kind)
    return "" if origin is None else f" (plugin: {origin})"


# --- The output signature: what each batch holds, from the checked config alone -------------------

@dataclasses.dataclass(frozen=True)
class Output:
    """One tensor of a batch as the dataset's element_spec gives it (without a ``model=`` repacking).

    ``shape`` has the batch axis first; None marks an axis known only when the batch is made.
    ``kind``: ``dense`` (tf.Tensor), ``ragged`` (tf.RaggedTensor, ragged_rank 1), ``sparse``
    (tf.SparseTensor), or ``batcher NAME`` (a registered batcher's: dtype and shape None, since
    only running it tells).
    """

    name: str
    role: str  # "input", "target", or "input (counter)" for a segment counter the model does not name
    dtype: str | None
    shape: tuple[int | None, ...] | None
    kind: str = "dense"

    def as_json(self) -> dict:
        return {"name": self.name, "role": self.role, "dtype": self.dtype,
                "shape": None if self.shape is None else list(self.shape), "kind": self.kind}


def static_batch(config: LoaderConfig) -> int | None:
    """The batch axis as the element_spec states it: target_batch_size when every batch is full, else None.

    The regroup stage tells (Stage.static_batch): bucketing's batch sizes differ per bucket, segmenting's
    are full unless ``allow_small_batch``; otherwise a batch is full when the remainder is dropped or the
    data repeat forever.
    """
    return stages.of(config).static_batch(config, config.target_batch_size)


def _output(config: LoaderConfig, name: str, role: str, batch: int | None) -> Output:
    """What finalize (batching.py) and the batching policies (policies.py) make of tensor ``name``."""
    info = config.tensors[name]
    spec = config.pad_specs.get(name)
    policy = spec.batching if spec is not None else "padded"
    if not config.padding or policy in ("dense", "ragged", "sparse"):
        # ragged and sparse keep the example's shape: a row length that varies is None, a fixed one stays
        return Output(name, role, info.dtype, (batch,) + tuple(info.shape), "dense" if policy == "padded" else policy)
    if policy != "padded":
        return Output(name, role, None, None, f"batcher {policy}")
    target = spec.shape if spec is not None and spec.shape is not None else (-1,) * info.rank
    return Output(name, role, info.dtype, (batch,) + tuple(dim if want == -1 else want
                                                           for want, dim in zip(target, info.shape)))


def signature(config: LoaderConfig) -> list[Output]:
    """The dataset's element_spec as Outputs: the model inputs, the segment counters the inputs do not
    name (segmenting adds them to the features), then the targets."""
    batch = static_batch(config)
    out = [_output(config, name, "input", batch) for name in config.inputs]
    out += [Output(name, "input (counter)", config.tensors[name].dtype, (batch,))
            for name in stages.of(config).carried(config)]
    return out + [_output(config, name, "target", batch) for name in config.targets]


def signature_lines(config: LoaderConfig) -> list[str]:
    """The signature as an aligned table."""
    rows = [("name", "role", "dtype", "shape", "kind")]
    for o in signature(config):
        rows.append((o.name, o.role, o.dtype or "?", "?" if o.shape is None else format_shape(o.shape), o.kind))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    table = ["  " + "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[4]]) for row in rows]
    return ["output signature (each batch, batch axis first; ? = known only when the batch is made):", *table]


# --- The distinct batch shapes: how often a jitted step (JAX, XLA) compiles -----------------------

Shapes = tuple  # ((tensor name, shape with the batch axis), ...) of one batch, in signature order


def batch_shapes(config: LoaderConfig) -> tuple[list[Shapes] | None, str]:
    """(every batch shape the config can give, why there are that many) when they are finitely many and known
    from the config and manifest; (None, why they vary) otherwise. A jitted step compiles once per shape."""
    outputs = signature(config)
    odd = next((o for o in outputs if o.kind != "dense"), None)
    if odd is not None and odd.kind.startswith("batcher "):
        return None, f"{odd.name} is made by the registered {odd.kind}: only running it tells its shape"
    if odd is not None:
        return None, f"{odd.name} is batched {odd.kind}: its shape is each batch's"
    fixed = stages.of(config).batch_shapes(config, outputs)
    if fixed is not None:
        return fixed
    varying = next(((o.name, axis) for o in outputs for axis, d in enumerate(o.shape[1:], 1) if d is None), None)
    if varying is not None:
        return None, f"{varying[0]} axis {varying[1]} is padded to each batch's longest"
    full = static_batch(config)
    if full is not None:
        why = "drop_remainder true" if config.drop_remainder else "epochs null: every batch is full"
        return [tuple((o.name, o.shape) for o in outputs)], why
    size = config.target_batch_size
    examples = (examples_in_run(config, list(range(len(config.dataset.files))))
                if stages.of(config).example_wise else None)
    if examples is None:
        return None, "drop_remainder false: the last batch holds what is left, which only reading tells"
    sizes = sorted({size} if examples >= size else set()) + ([examples % size] if examples % size else [])
    shapes = [tuple((o.name, (b,) + tuple(o.shape[1:])) for o in outputs) for b in sorted(sizes, reverse=True)]
    left = (f"; the last batch holds the {examples % size:,} examples left (drop_remainder false)"
            if examples % size else "")
    return shapes, f"{examples:,} examples in the run{left}"


SHAPES_SHOWN = 3  # batch shapes the describe line spells out


def batch_shapes_line(config: LoaderConfig) -> str:
    """How many batch shapes the config gives, the first few spelled out, or that they vary per batch."""
    shapes, why = batch_shapes(config)
    if shapes is None:
        return (f"batch shapes: vary per batch ({why}): a jitted step (JAX, XLA) compiles once per new shape; "
                "fixed padding shapes, bucketing's pad_to_boundary or packing give a few (docs/backends.md)")
    shown = "; ".join(", ".join(f"{name} {format_shape(shape)}" for name, shape in one)
                      for one in shapes[:SHAPES_SHOWN])
    more = f"; and {len(shapes) - SHAPES_SHOWN} more" if len(shapes) > SHAPES_SHOWN else ""
    return f"batch shapes: {len(shapes)} ({why}): {shown}{more}"


# --- Record and batch counts from the manifest -----------------------------------------------------

def per_file_records(config: LoaderConfig) -> list[int | None]:
    """The manifest's num_records of each data file, None where it lists none."""
    manifest = config.dataset.manifest
    entries = [manifest.entry(f) for f in config.dataset.files]
    return [None if e is None else e.num_records for e in entries]


def steps_per_epoch(config: LoaderConfig) -> int | None:
    """Batches one pass over the data gives, when the manifest's counts fix it (config/accounting.py).

    With ``epochs: null`` every batch is full and batches run on across passes: the count is the
    whole batches one pass fills (records // batch size), the number to give Keras's steps_per_epoch.
    """
    one_pass = dataclasses.replace(config, epochs=1, drop_remainder=config.drop_remainder or config.epochs is None)
    return _batches(one_pass)


def total_batches(config: LoaderConfig) -> int | None:
    """The dataset's cardinality when known and finite: what Keras counts as one epoch of ``fit``."""
    return _batches(config)


def _batches(config: LoaderConfig) -> int | None:
    """The batches the whole data gives over ``config``'s epochs, as input_fn counts them (its stage's say)."""
    examples = examples_in_run(config, list(range(len(config.dataset.files))))
    return stages.of(config).batches(config, examples, config.target_batch_size)


def steps_line(config: LoaderConfig) -> str:
    steps = steps_per_epoch(config)
    if steps is None:
        return f"steps per epoch: unknown ({_unknown_steps(config)})"
    records = sum(per_file_records(config))
    line = (f"steps per epoch: {steps:,} (one pass over {records:,} records in batches of "
            f"{config.target_batch_size}")
    if config.epochs is None:
        return line + ("; with epochs null batches run on across passes: give Keras steps_per_epoch="
                       f"{steps})")
    return line + f"; the dataset holds {total_batches(config):,} batches in {config.epochs} epoch(s))"


def _unknown_steps(config: LoaderConfig) -> str:
    if kind(config.type).sequence:
        return "window counts are drawn at random"
    stage = stages.of(config)
    if not stage.example_wise:
        return f"{stage.name}: {stage.counted_as} are counted only once made"
    if config.reading.on_corrupt != "fail":
        return "on_corrupt skip_file may read fewer records"
    return "the manifest does not list the record count of every data file"


# --- The plan as one JSON object --------------------------------------------------------------------

def _auto(value):
    return "autotune" if value is None else value


def _jsonable(value):
    """A pad value as JSON holds it (non-finite floats as strings: JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _tensor(info) -> dict | None:
    return None if info is None else {"dtype": info.dtype, "shape": list(info.shape)}


def transforms(config: LoaderConfig) -> list[dict]:
    """Secondary features and steps in the order they run, each with what it receives and makes."""
    out = []
    on_chunks = after_chunking(config)
    for on, item in [*(("examples", i) for i in run_order(config)), *(("chunks", f) for f in on_chunks)]:
        if isinstance(item, Step):
            out.append({"kind": "step", "type": item.type, "tensor": item.tensor, "input": _tensor(item.input_info),
                        "output": _tensor(item.output_info), "on": on, "plugin": _plugin_origin(STEPS.get(item.type))})
        else:
            out.append({"kind": "secondary", "type": item.type, "tensor": item.to_name, "input": None,
                        "output": _tensor(item.info), "on": on, "plugin": _plugin_origin(SECONDARY.get(item.type))})
    return out


def _padding(config: LoaderConfig) -> list[dict]:
    out = []
    for name in config.outputs:
        info, spec = config.tensors[name], config.pad_specs.get(name)
        policy = spec.batching if spec is not None else "padded"
        padded = config.padding and policy == "padded"
        value = spec.value if spec is not None and spec.value is not None else default_value(info.dtype)
        out.append({"tensor": name, "batching": policy if config.padding else "dense",
                    "shape": None if spec is None or spec.shape is None else list(spec.shape),
                    "axes": padded_axes(config, name) if padded else [],
                    "value": _jsonable(value) if padded else None,
                    "batching_args": dict(spec.batching_args) if spec is not None and spec.batching_args else None})
    return out


def _blocks(config: LoaderConfig) -> dict:
    """The regroup blocks (bucketing, packing, chunking, segmenting), null but the config's stage."""
    stage = stages.of(config)
    return {name: stage.as_json(config) if name == stage.name else None for name in stages.names()}


def _reading_json(config: LoaderConfig) -> dict:
    """describe --json's ``reading``: the shuffle settings (None where nothing is shuffled) and the reading ones."""
    shuffling, reading = config.shuffling, config.reading
    shuffled = shuffling.shuffle
    return {"shuffle": shuffled, "seed": config.seed, "shuffle_scope": shuffling.scope if shuffled else None,
            "files_at_a_time": shuffling.num_mix_files if shuffled else (reading.num_parallel_reads or 1),
            "filename_shuffle_buffer": shuffling.num_filenames_shuffle_buffer if shuffled else None,
            "shuffle_buffer": shuffling.num_shuffle_buffer_elements if shuffled else None,
            "shuffles": ("windows" if kind(config.type).sequence else "examples") if shuffled else None,
            "num_parallel_reads": _auto(reading.num_parallel_reads),
            "num_parallel_parses": _auto(reading.num_parallel_parses),
            "sloppy_interleave": reading.sloppy_interleave,
            "interleave_out_buffer_elements": reading.num_interleave_out_buffer_elements,
            "interleave_in_buffer_elements": reading.num_interleave_in_buffer_elements,
            "read_buffer_bytes": reading.num_read_buffer_bytes, "prefetch": _auto(reading.num_prefetch),
            "on_corrupt": reading.on_corrupt, "random_access": _random_access_json(config)}


def _random_access_json(config: LoaderConfig) -> dict:
    """How records are read at their offsets (a global shuffle, read_record): the byte source and, for
    TensorFlow's file systems, the reads in flight."""
    access, files = config.dataset.access, config.dataset.files
    source = positional.chosen(access, files)
    return {"source": source, "reads_in_flight": access.reads_in_flight if source == "filesystem" else None,
            "described": positional.describe(access, files)}


def plan(config: LoaderConfig) -> dict:
    """Everything ``describe`` says, as one JSON-serializable dict (``describe --json``)."""
    dataset, manifest = config.dataset, config.dataset.manifest
    counts = per_file_records(config)
    known = None not in counts
    return {
        "config": config.source,
        "name": config.name,
        "loader": config.type,
        "dataset": {"type": dataset.type, "pattern": dataset.pattern, "list_file": dataset.list_file,
                    "manifest": manifest.path, "compression": manifest.compression,
                    "records_are": "SequenceExamples" if manifest.allow_var_len else "Examples"},
        "files": {"count": len(dataset.files), "paths": list(dataset.files)},
        "records": {"total": sum(counts) if known else None, "per_file": counts,
                    "listed": sum(c is not None for c in counts)},
        "sources": _sources_json(config),
        "batch": {"target_batch_size": config.target_batch_size, "static": static_batch(config),
                  "drop_remainder": config.drop_remainder, "epochs": config.epochs},
        "steps_per_epoch": steps_per_epoch(config),
        "batches": total_batches(config),
        "repeats_forever": config.epochs is None,
        "reading": _reading_json(config),
        "windows": None if config.window is None else {
            "unit": kind(config.type).window_unit, "min": config.window.min_window,
            "max": config.window.max_window, "stride": config.window.stride},
        "parsing": {"call": ("tf.io.parse_sequence_example" if manifest.allow_var_len else "tf.io.parse_example"),
                    "records_per_block": sequence_records_per_block(config), "path": parsing_path(config)},
        "tensors": [{"name": n, "role": "input" if n in config.inputs else "target", **_tensor(config.tensors[n])}
                    for n in config.outputs],
        "transforms": transforms(config),
        "padding": _padding(config),
        **_blocks(config),
        "signature": [o.as_json() for o in signature(config)],
        "batch_shapes": _shapes_json(config),
        "multi_load": config.multi_load,
    }


def _shapes_json(config: LoaderConfig) -> dict:
    shapes, why = batch_shapes(config)
    return {"count": None if shapes is None else len(shapes), "why": why,
            "shapes": None if shapes is None else [{name: list(shape) for name, shape in one} for one in shapes]}


def run(path: str, out: TextIO, *, as_json: bool = False, trust_plugins: bool = True) -> None:
    """Load and check ``path`` (raising BatchLoaderError) and print its description (or, ``as_json``, its
    plan as one JSON object) to ``out``. ``trust_plugins=False``: import none of the config's own plugins
    (a config of plugin types then raises PluginsNotChecked naming them)."""
    config = load_config(path, trust_plugins=trust_plugins)
    if as_json:
        json.dump(plan(config), out, indent=2, default=str)  # (a YAML date in batching_args, say)
        print(file=out)
        return
    for line in describe(config):
        print(line, file=out)
