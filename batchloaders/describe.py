"""``batchloaders describe CONFIG``: what a config compiles to, read from the checked config alone.

Prints the loader type, the data files, every output tensor's dtype and
per-example shape, the padding of each tensor, and which parsing path the
compiler takes and why::

    $ batchloaders describe configs/chars_independent.yaml
    config: configs/chars_independent.yaml
    loader: independent
    data files: 4 (dir dataset of the files matching **/*.{tfrecords,tfrecord,tfrec}{,.gz,.zz}; manifest .../demo_data/chars/__manifest__.json)
    ...
    tensor context: int32 [16] (model input)
    tensor next_char: int32 [] (model target)
    padding: none
    parsing: vectorized: records are batched while serialized and parsed with one ...

Nothing is read from the data files and no dataset is built.
"""
from __future__ import annotations

from typing import TextIO

from batchloaders.config.model import LoaderConfig, TensorInfo, format_shape

VECTORIZED = ("vectorized: records are batched while serialized and parsed with one "
              "parse_example/parse_sequence_example call per batch; secondary features, steps and padding "
              "run on whole batches")
MULTI_LOAD = ("accepted for compatibility; it changes nothing because the batched path is always taken")



def parse_call(config: LoaderConfig) -> str:
    """The one tf.io call that parses a batch (or block) of this dataset's records."""
    if config.dataset.manifest.allow_var_len:
        return ("tf.io.parse_sequence_example call, because the manifest allows variable-length feature lists "
                "(records are SequenceExamples)")
    return "tf.io.parse_example call, because the manifest has fixed-length features only (records are Examples)"


def _steps_per_record(config: LoaderConfig) -> str:
    steps = next(iter(config.selected.values())).steps_per_record
    return "feature lists of varying length per record" if steps is None else f"{steps} steps per record"


def _shuffled_batches(config: LoaderConfig, what: str) -> str:
    shuffle = (f"shuffled in a buffer of {config.num_shuffle_buffer_elements} {what}, then "
               if config.shuffle else "")
    return f"{shuffle}batched with padded_batch"


def parsing_path(config: LoaderConfig) -> str:
    """Which parsing path the config compiles to and why, as one line."""
    if config.type == "independent":
        return f"{VECTORIZED}; here: one {parse_call(config)}"
    from batchloaders.loaders import continuous_sequence, discrete_sequence

    call = parse_call(config)
    if config.type == "continuous_sequence":
        per_block = continuous_sequence.records_per_block(config, config.selected)
        return (f"vectorized in blocks: each file is read in blocks of {per_block} records; each block is "
                f"parsed with one {call}, and flattened along the first axis into steps "
                f"({_steps_per_record(config)}); a Dataset.scan per file cuts window positions, carrying the "
                "unconsumed steps from block to block; the windows of a block are gathered with one tf.gather "
                f"per feature; windows are {_shuffled_batches(config, 'windows')}; secondary features, steps "
                "and padding run on whole batches")
    per_block = discrete_sequence.records_per_block(config)
    return (f"vectorized in blocks: each file's records are read in blocks of {per_block} and stay serialized "
            "while a Dataset.scan per file plans the windows (carrying the records of an unfinished window to "
            f"the next block); the records of each block's windows are parsed with one {call}; feature lists "
            "are concatenated along their first axis per window and context features stacked one row per "
            f"record; windows are {_shuffled_batches(config, 'windows')}; secondary features, steps and "
            "padding run on whole batches")


def windows_line(config: LoaderConfig) -> str | None:
    if config.type == "independent":
        return None
    unit = "steps" if config.type == "continuous_sequence" else "whole records"
    size = (f"{config.min_window} {unit}" if config.min_window == config.max_window
            else f"{config.min_window}..{config.max_window} {unit} (drawn uniformly per window)")
    if config.type == "continuous_sequence" and config.stride:
        placement = f"starting every {config.stride} steps"
    else:
        placement = "back to back"
    max_offset = (config.stride or config.max_window) if config.type == "continuous_sequence" else config.max_window
    start = (f"; the first window of each file starts after a random offset of 0..{max_offset - 1} "
             f"{'steps' if config.type == 'continuous_sequence' else 'records'}"
             if config.shuffle and max_offset > 1 else "; the first window starts at the start of each file")
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
    from batchloaders.secondary.const import default_value

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


def reading_line(config: LoaderConfig) -> str:
    if config.shuffle:
        return (f"reading: {config.num_mix_files} files at a time, file names shuffled in a buffer of "
                f"{config.num_filenames_shuffle_buffer}")
    parallel = config.num_parallel_reads or 1
    return "reading: one file at a time, in order" if parallel == 1 else f"reading: {parallel} files at a time"


def records_line(config: LoaderConfig) -> str:
    """What the manifest's files[] says of the record count, and what follows from it."""
    from batchloaders.config.accounting import expected_batches, record_counts

    counts = record_counts(config.dataset.manifest, config.dataset.files)
    if counts is None:
        listed = sum(config.dataset.manifest.entry(f) is not None for f in config.dataset.files)
        return (f"records: unknown ({listed} of {len(counts or config.dataset.files)} data files listed with "
                "num_records in the manifest; `batchloaders manifest DIR` records them)")
    line = f"records: {sum(counts):,} in {len(counts)} files (from the manifest's files)"
    batches = expected_batches(config, list(range(len(counts))), config.target_batch_size)
    if batches is not None:
        line += f"; {batches:,} batches in {config.epochs} epoch(s), the dataset's cardinality"
    return line


def integrity_line(config: LoaderConfig) -> str:
    if config.on_corrupt == "skip_file":
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
        f"data files: {len(dataset.files)} ({dataset.type} dataset"
        f"{' of the files matching ' + dataset.pattern if dataset.pattern else ''}"
        f"; manifest {dataset.manifest.path}"
        f"{'; ' + dataset.manifest.compression + ' compressed' if dataset.manifest.compression else ''})",
        f"batch size: {config.target_batch_size} (drop_remainder {str(config.drop_remainder).lower()}; "
        f"epochs {epochs})",
        records_line(config),
        reading_line(config),
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
    if config.bucketing is not None:
        lines.append(bucketing_line(config))
    if config.packing is not None:
        spec = config.packing
        lines.append(f"packing: {', '.join(spec.tensors)} packed best fit into rows of {spec.length} steps "
                     f"({'long examples split into pieces' if spec.allow_split else 'an example longer than a row is an error'}), "
                     f"with {spec.segment_ids} and {spec.positions}; target_batch_size counts rows")
    if config.chunking is not None:
        lines.extend(chunking_lines(config))
    if config.segmenting is not None:
        lines.extend(segmenting_lines(config))
    lines.append(f"parsing: {parsing_path(config)}")
    lines.append(f"multi_load: {str(config.multi_load).lower()}: {MULTI_LOAD}")
    return lines


def chunking_lines(config: LoaderConfig) -> list[str]:
    """How each tensor is cut, what is copied, what is built on the chunks."""
    from batchloaders.config.order import after_chunking

    spec = config.chunking
    lines = [f"chunking: cores of {spec.size} steps every {spec.step}, context [{spec.left}, {spec.right}] (zeros at "
             f"the borders), a last core shorter than {spec.min_size} dropped; chunks "
             + (f"shuffled in a buffer of {spec.shuffle_buffer}" if spec.shuffle_buffer else "in order")
             + "; target_batch_size counts chunks"]
    for t in spec.tensors:
        rate = "" if (t.size, t.step) == (spec.size, spec.step) else f" (size {t.size}, step {t.step})"
        lines.append(f"  chunked {t.name}: chunks of up to {t.width} steps, context [{t.left}, {t.right}]{rate}"
                     + (": fixes the number of chunks" if t.name == spec.reference else ""))
    for name in spec.copied:
        lines.append(f"  copied {name}: the same in every chunk of an example")
    for feature in after_chunking(config):
        lines.append(f"  built on the chunks: {feature.to_name} = {feature.type}: {_info(feature.info)}")
    return lines


def segmenting_lines(config: LoaderConfig) -> list[str]:
    """How sequences become segments in lanes, and the counters the features gain."""
    spec = config.segmenting
    lanes = spec.lanes or config.target_batch_size
    end = ("dropped (smaller batches)" if spec.allow_small_batch
           else "filled with zero-length padding segments (every batch has all lanes)")
    key = (f"key from {spec.key_from_manifest or spec.key}, unique per epoch" if spec.key is not None
           else "key '<file path>:<record index>' of each sequence's (first) record")
    return [f"segmenting: sequences cut into segments of {spec.num_unroll} steps "
            + ("(the last one padded)" if spec.pad else "(lengths must be multiples)")
            + f" in {lanes} lanes, each lane taking the next waiting sequence when its own ends; at the end of "
            f"the data the lanes with no work left are {end}; {key}",
            f"  segmented: {', '.join(spec.tensors)}",
            *(f"  copied {name}: the same in every segment of a sequence" for name in spec.context),
            f"  counters in the features: {', '.join(spec.names.values())}"]


def transform_lines(config: LoaderConfig) -> list[str]:
    """Secondary features and steps in the order they run, each with what it makes."""
    from batchloaders.registry import SECONDARY, STEPS
    from batchloaders.config.model import Step
    from batchloaders.config.order import run_order

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


def _info(info) -> str:
    return "?" if info is None else f"{info.dtype} {format_shape(info.shape)}"


def _plugin(kind) -> str:
    from batchloaders.registry import BUILTIN

    origin = kind.origin if kind is not None else ""
    if kind is None or kind.scope == BUILTIN or " (" not in origin:
        return ""
    return f" (plugin: {origin.split(' (', 1)[1][:-1]})"  # origin: "module.function (file, line N)"


def bucketing_line(config: LoaderConfig) -> str:
    spec = config.bucketing
    shown = [f"[{lo}, {hi})" for lo, hi in zip((0,) + spec.boundaries, spec.boundaries)] + [f"{spec.boundaries[-1]}+"]
    sizes = ", ".join(f"{span}: {size}" for span, size in zip(shown, spec.batch_sizes))
    how = (f"batch size x longest length a bucket admits <= max_tokens {spec.max_tokens}" if spec.max_tokens
           else "batch_sizes as given")
    pad = (f"; {', '.join(spec.pad_to_boundary)} padded to the bucket's boundary" if spec.pad_to_boundary else "")
    return (f"bucketing: by the length of {spec.by}, {len(spec.batch_sizes)} buckets ({how}); "
            f"length: batch size = {sizes}{pad}; target_batch_size {config.target_batch_size} examples are read "
            "and transformed together before they are regrouped; batches per epoch are not known in advance")


def run(path: str, out: TextIO) -> None:
    """Load and check ``path`` (raising BatchLoaderError) and print its description to ``out``."""
    from batchloaders.config.config import load_config

    for line in describe(load_config(path)):
        print(line, file=out)
