"""``batchloaders init DATA_DIR``: a commented loader config for the data in DATA_DIR, every required key filled.

The spec requires the reading, shuffling and batching sizes and names no defaults; this command chooses
them from the data, and says in a comment above each key what it does and why it has that value:

* the features from ``DATA_DIR/__manifest__.json`` (written first, as ``batchloaders manifest [--pattern]
  [--raw]`` writes it, when there is none or ``--raw`` is given), each a model input unless
  ``--inputs``/``--targets`` say otherwise or the data suggests a target
  (:func:`batchloaders.prepare.infer.suggested_targets`: a feature named like a label, or the integer feature
  lists of one value per step beside float ones); each the tensor of its stored name, the characters Keras
  refuses in a name made ``_`` (:func:`batchloaders.prepare.infer.tensor_names`);
* the read buffer from the files' sizes, the shuffle buffer from the size of a record (or a window)
  as the first records of every file show it and a stated memory budget, the windows of a sequence
  loader from the record counts (and steps per record) of the shortest file;
* padding when a tensor varies in length (a feature list, or the windows of a sequence loader).

The config is checked as ``validate`` checks it before it is printed (standard output) or written
(``-o CONFIG``, never over an existing file without ``--force``). Exit status: 0 when written, 1 when
the data or the manifest stops it, 2 for a name the manifest does not declare.
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys
import textwrap
from typing import Sequence, TextIO

import tensorflow as tf

from batchloaders.errors import BatchLoaderError, ConfigError, DataError, Problem, suggest
from batchloaders.config.config import config_from_text
from batchloaders.config.datasets import resolve
from batchloaders.config.document import Document
from batchloaders.config.kinds import DEFAULT, kind
from batchloaders.config.manifest import MANIFEST_NAME
from batchloaders.core.model import Dataset, ManifestFeature
from batchloaders.cli import write_manifest
from batchloaders.cli.progress import Printed
from batchloaders.prepare import manifest as prepare_manifest, tfds_info
from batchloaders.prepare.infer import suggested_targets, tensor_names
from batchloaders.read import naming
from batchloaders.read.records import ReadError, count, read_records
from batchloaders.transform.steps.decode_image import image_format, image_shape

MEMORY_BUDGET = 256 * 2**20  # bytes the shuffle buffer may hold
MAX_READ_BUFFER = 2**20  # past 1 MiB a larger read buffer gains nothing on a local disk
LARGE_RECORD = 64 * 2**10  # records this large are read in one call each: a buffer only copies them
BATCH_SIZE = 32
MIX_FILES = 8  # files open at once to mix their records; each holds a read buffer
SEED = 1
STEP_WINDOW = 64  # continuous_sequence: steps per window
RECORD_WINDOW = (2, 4)  # discrete_sequence: records per window, fewest and most
SAMPLE_RECORDS = 64  # records of each file measured
IMAGE_RECORDS = 256  # records looked at for the sizes of encoded images, the first SAMPLE_RECORDS of each file
MAX_BUFFER_ELEMENTS = 2**24  # the schema's bound


class UnknownName(ConfigError):
    """--inputs or --targets names a feature the manifest does not declare (a usage error: exit 2)."""


@dataclasses.dataclass(frozen=True)
class Measured:
    """What the data files show, for the sizes chosen from them."""

    largest_file: int  # bytes
    record_bytes: float  # mean serialized record, as stored
    parsed_bytes: float  # mean bytes of the chosen features of one record once parsed
    steps_per_record: float  # mean steps along the first axis of the first chosen feature
    records: int | None  # in all files, when the manifest lists every file
    shortest: int | None  # records of the shortest file that has any, likewise


@dataclasses.dataclass(frozen=True)
class Choices:
    """What ``batchloaders init`` is asked for, one field per command-line option.

    ``raws``: ``--raw NAME=DTYPE[SHAPE]`` declarations, as ``batchloaders manifest`` takes them: the manifest is
    then written (or updated) with them first. ``split``: in a TFDS-prepared DATA_DIR, the split read (the
    config's pattern matches its files). ``output``: the config file written (None: printed); ``force``:
    replace it if it exists.
    """

    pattern: str | None = None
    loader: str = DEFAULT
    inputs: Sequence[str] | None = None
    targets: Sequence[str] | None = None
    output: str | None = None
    force: bool = False
    raws: Sequence[str] = ()
    split: str | None = None


def run(directory: str, choices: Choices = Choices(), *, out: TextIO | None = None,
        err: TextIO | None = None) -> int:
    """Write the config for DATA_DIR to ``choices.output`` (or print it to ``out``).

    Args:
        directory: the data directory (DATA_DIR).
        choices: the command's options.
        out: where the config is printed without an output file (default: standard output).
        err: where errors and notes go (default: standard error).

    Returns:
        The exit status: 0 when written, 1 when the data or the manifest stops it, 2 for a usage error.
    """
    out, err = out or sys.stdout, err or sys.stderr
    output = choices.output
    try:
        if choices.split is not None or (choices.pattern is None and tfds_info.is_tfds_dir(directory)):
            pattern, raws = _split(directory, choices.split, choices.pattern, choices.raws, err)
            choices = dataclasses.replace(choices, pattern=pattern, raws=raws)
        text = config_text(directory, choices, err)
        if output is not None:
            with open(output, "w" if choices.force else "x", encoding="utf-8") as f:
                f.write(text)
    except FileExistsError:
        print(f"batchloaders init: error: {output} exists: expected a new file (--force replaces it)", file=err)
        return 1
    except (BatchLoaderError, write_manifest.Usage) as error:
        for line in write_manifest.error_lines(error):
            print(f"batchloaders init: error: {line}", file=err)
        return 2 if isinstance(error, UnknownName) or write_manifest.is_usage(error) else 1
    if output is None:
        out.write(text)
    else:
        print(f"batchloaders init: wrote {output}; check it with `batchloaders describe {output}`", file=err)
    return 0


def config_text(directory: str, choices: Choices, err: TextIO) -> str:
    """The commented YAML config, checked as ``validate`` checks it (``choices.split`` already applied)."""
    pattern, output = choices.pattern, choices.output
    ensure_manifest(directory, pattern, err, choices.raws)
    dataset = resolve({"type": "dir", "args": {"data_dir": os.path.abspath(directory),
                                               **({"pattern": pattern} if pattern else {})}},
                      Document({}, "<command line>", os.getcwd(), {}))
    roles = model_roles(dataset, choices.inputs, choices.targets)
    chosen = [dataset.manifest.features[name] for name in roles[0] + roles[1]]
    measured = measure(dataset, chosen)
    base = os.path.dirname(os.path.abspath(output)) if output else os.getcwd()
    data_dir = os.path.relpath(os.path.abspath(directory), base).replace(os.sep, "/")
    text = render(dataset, choices, roles, chosen, measured, data_dir=data_dir)
    config_from_text(text, output or "<init>", base_dir=base)  # a config that validate refuses is our bug
    return text


def _split(directory: str, split: str | None, pattern: str | None, raws: Sequence[str],
           err: TextIO) -> tuple[str | None, Sequence[str]]:
    """(the config's pattern, the --raw declarations left to apply) for ``--split``: the manifest lists every
    split's files (one manifest serves the config of each split), the config's pattern only the split's.
    A TFDS directory without ``--split`` is refused: its default pattern would mix the splits (test into train)."""
    tfds = tfds_info.read_info(directory) if tfds_info.is_tfds_dir(directory) else None
    if split is None:
        raise write_manifest.Usage(f"{directory} holds the splits {', '.join(tfds.splits) or '(none listed)'} that "
                                   "TFDS prepared, which one config must not mix: expected --split NAME")
    chosen = write_manifest.split_files(directory, tfds, split, pattern)
    ensure_manifest(directory, None, err, raws)
    return chosen, ()


def ensure_manifest(directory: str, pattern: str | None, err: TextIO, raws: Sequence[str] = ()) -> None:
    """Write DATA_DIR's manifest as ``batchloaders manifest [--pattern GLOB] [--raw SPEC ...]`` does when there is
    none, or when ``raws`` declare raw tensors (in the manifest there, as ``manifest --raw`` does)."""
    specs = write_manifest.raw_specs(raws)  # a malformed --raw is a usage error before any file is read
    if os.path.lexists(os.path.join(directory, MANIFEST_NAME)) and not specs:
        return
    written = prepare_manifest.write_manifest(directory, pattern=pattern, raws=specs, reporter=Printed(err))
    for line in written.lines():
        print(f"batchloaders init: {line}", file=err)


def model_roles(dataset: Dataset, inputs: Sequence[str] | None,
                targets: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """(inputs, targets) as feature names: as given; by default every feature, label-like names targets."""
    declared = list(dataset.manifest.features)
    for option, names in (("--inputs", inputs), ("--targets", targets)):
        for name in names or ():
            if name not in declared:
                raise UnknownName(Problem(
                    dataset.manifest.path, "$.features", f"found no feature {name!r} (named by {option}): "
                    f"expected one of {', '.join(declared)}{suggest(name, declared)}"))
    both = sorted(set(inputs or ()) & set(targets or ()))
    if both:
        raise UnknownName(Problem("<command line>", "--targets", f"found {', '.join(map(repr, both))} in both "
                                  "--inputs and --targets: expected each feature in one of them"))
    if targets is None:
        suggested, _ = suggested_targets(dataset.manifest.features)
        targets = [n for n in suggested if n not in (inputs or ())]
    if inputs is None:
        inputs = [n for n in declared if n not in targets] or list(targets)
        targets = [n for n in targets if n not in inputs]
    return list(inputs), list(targets)


def measure(dataset: Dataset, chosen: list[ManifestFeature]) -> Measured:
    """Sizes from the files and the first SAMPLE_RECORDS records of each."""
    stored = parsed = steps = 0.0
    seen, counts = 0, []
    for path in dataset.files:
        before = seen
        try:
            for _, _, serialized in read_records(path, dataset.manifest.compression, limit=SAMPLE_RECORDS):
                record_parsed, record_steps = _parsed(tf.train.SequenceExample.FromString(serialized), chosen)
                stored += len(serialized)
                parsed += record_parsed
                steps += record_steps
                seen += 1
        except ReadError as error:
            raise DataError(Problem(path, "file", f"{error}: see `batchloaders verify`")) from None
        entry = dataset.manifest.entry(path)
        # The manifest's count, or the sample's when it read the whole file.
        if entry is not None:
            counts.append(entry.num_records)
        else:
            counts.append(seen - before if seen - before < SAMPLE_RECORDS else None)
    complete = None not in counts
    seen = max(seen, 1)
    return Measured(largest_file=max(os.path.getsize(path) for path in dataset.files),
                    record_bytes=stored / seen, parsed_bytes=parsed / seen,
                    steps_per_record=max(steps / seen, 1.0),
                    records=sum(counts) if complete else None,
                    shortest=min([n for n in counts if n] or [1]) if complete else None)


def _parsed(record, chosen: list[ManifestFeature]) -> tuple[int, int]:
    """(bytes once parsed, steps along the first axis of the first feature) of one record."""
    total, steps = 0, None
    for feature in chosen:
        if feature.ragged:  # rows of one value list
            values = [record.context.feature[feature.name]]
            which = values[0].WhichOneof("kind")
            stored = len(getattr(values[0], which).value) if which else 0
            feature_steps = stored if feature.deserialize_type == "raw" else stored // max(math.prod(feature.shape), 1)
        elif feature.var_len:
            values = list(record.feature_lists.feature_list[feature.name].feature)
            feature_steps = len(values)
        else:
            values = [record.context.feature[feature.name]]
            feature_steps = feature.record_shape[0] if feature.record_shape else 1
        for value in values:
            which = value.WhichOneof("kind")
            items = getattr(value, which).value if which else []
            total += sum(map(len, items)) if which == "bytes_list" else len(items) * _itemsize(feature.dtype)
        steps = feature_steps if steps is None else steps
    return total, steps or 0


def _per_step(feature: ManifestFeature) -> str:
    if feature.ragged:
        return ", a variable length"
    return " per step, a feature list" if feature.var_len else ""


def _itemsize(dtype: str) -> int:
    try:
        return tf.as_dtype(dtype).size
    except (TypeError, ValueError):
        return 8


def windows(loader: str, measured: Measured) -> tuple[int, int, str] | None:
    """(min_window, max_window, why) of a sequence loader, None for the others."""
    loader_kind = kind(loader)
    if not loader_kind.sequence:
        return None
    if loader_kind.concatenates_records:
        shortest = None if measured.shortest is None else int(measured.shortest * measured.steps_per_record)
        window = max(1, min(STEP_WINDOW, shortest or STEP_WINDOW))
        return window, window, (f"windows of {window} steps (about {measured.steps_per_record:,.0f} per record"
                                + (f"; the shortest file holds {shortest:,}" if shortest is not None else "")
                                + "); a smaller min_window gives windows of random lengths")
    most = max(1, min(RECORD_WINDOW[1], measured.shortest or RECORD_WINDOW[1]))
    fewest = min(RECORD_WINDOW[0], most)
    return fewest, most, (f"windows of {fewest} to {most} whole records"
                          + (f" (the shortest file holds {count(measured.shortest, 'record')})"
                             if measured.shortest is not None else ""))


def shuffle_elements(loader: str, measured: Measured, window: tuple[int, int, str] | None) -> tuple[int, str]:
    """(num_shuffle_buffer_elements, why): as many examples as MEMORY_BUDGET holds, at most the dataset's."""
    if window is None:  # the buffer holds records as stored
        each, what, examples = measured.record_bytes, "records", measured.records
    elif kind(loader).concatenates_records:
        each = window[1] * measured.parsed_bytes / measured.steps_per_record
        what = "windows"
        examples = (None if measured.records is None
                    else max(1, int(measured.records * measured.steps_per_record) // window[1]))
    else:
        each, what, examples = window[1] * measured.parsed_bytes, "windows", measured.records
    elements = max(1, int(MEMORY_BUDGET // max(each, 1.0)))
    capped = examples is not None and examples < elements
    elements = min(examples if capped else elements, MAX_BUFFER_ELEMENTS)
    why = (f"{what} of about {each:,.0f} bytes in a budget of {MEMORY_BUDGET // 2**20} MiB"
           + (f", capped at the {count(examples, what[:-1])} of the dataset (the buffer then holds all of it)"
              if capped else ""))
    return elements, why


def read_buffer(measured: Measured) -> tuple[int, str]:
    if measured.record_bytes >= LARGE_RECORD:
        return 0, (f"no read buffer: records of about {measured.record_bytes:,.0f} bytes are each read in one "
                   "call already, and a buffer would only copy them")
    size = min(measured.largest_file, MAX_READ_BUFFER)
    return size, (f"records of about {measured.record_bytes:,.0f} bytes: a buffer saves a read call per record; "
                  + ("as large as the largest file" if size == measured.largest_file else "1 MiB")
                  + ", held per open file")


def _comment(text: str, indent: int) -> list[str]:
    return [" " * indent + "# " + line for line in textwrap.wrap(text, 100 - indent)]


def _key(lines: list[str], indent: int, key: str, value: str, why: str) -> None:
    lines.extend(_comment(why, indent))
    lines.append(f"{' ' * indent}{key}:" + (f" {value}" if value else ""))  # no value: a block follows


def _flow(names: Sequence[str]) -> str:
    return "[" + ", ".join(names) + "]"


def render(dataset: Dataset, choices: Choices, roles: tuple[list[str], list[str]], chosen: list[ManifestFeature],
           measured: Measured, *, data_dir: str) -> str:
    """The config as commented YAML: ``choices``' loader, reading ``choices.pattern``'s files of ``data_dir``."""
    inputs, targets = roles
    loader, pattern = choices.loader, choices.pattern
    manifest = dataset.manifest
    window = windows(loader, measured)
    header = (f"Written by `batchloaders init` for {count(len(dataset.files), 'data file')}"
              + (f" ({count(measured.records, 'record')})" if measured.records is not None else "")
              + f" described by {data_dir}/{MANIFEST_NAME}. Every value can be changed: `batchloaders validate` "
              "checks the result, `batchloaders describe` shows what it compiles to.")
    lines = _comment(header, 0)
    names = tensor_names(manifest.features)
    _key(lines, 0, "name", _quoted(os.path.basename(os.path.dirname(manifest.path))),
         "a label for this config in messages: the data directory's name")
    _key(lines, 0, "type", loader, f"{loader}: {_loader_text(loader)}")
    _key(lines, 0, "model", "", "the model's tensors by role: fit() gets (inputs, targets) dicts by these names")
    _key(lines, 2, "inputs", _flow([names[n] for n in inputs]), "the tensors the model takes (every feature read "
                                                                "is an input or a target; --inputs chooses them)")
    _key(lines, 2, "targets", _flow([names[n] for n in targets]), _targets_why(manifest, inputs, targets))
    _key(lines, 0, "args", "", "the loader's arguments")
    lines.extend(_dataset_lines(data_dir, pattern))
    lines.extend(_sizes_lines(dataset, loader, measured, window))
    lines.extend(_feature_lines(chosen, loader, window, names))
    lines.extend(_image_lines(found_images(dataset, chosen), names))
    return "\n".join(lines) + "\n"


def _targets_why(manifest, inputs: list[str], targets: list[str]) -> str:
    """The comment above ``targets``: why these, or why none."""
    suggested, reason = suggested_targets(manifest.features)
    if targets and targets == [n for n in suggested if n not in inputs]:
        return f"what the model predicts: {reason}; --targets chooses others"
    if targets:
        return "what the model predicts, as --targets chose"
    if suggested:
        return "no target: --inputs takes every feature named as one; --targets NAME chooses one"
    return (f"no target: {reason}; --targets NAME chooses one (without targets each batch is the inputs alone, "
            "as predict() takes them)")


def _loader_text(loader: str) -> str:
    loader_kind = kind(loader)
    if not loader_kind.sequence:
        return "every record is one example"
    if loader_kind.concatenates_records:
        return "each example is a window of steps cut from one file's records joined end to end"
    return "each example is a window of whole consecutive records of one file"


def _dataset_lines(data_dir: str, pattern: str | None) -> list[str]:
    lines: list[str] = []
    _key(lines, 2, "dataset", "", "where the data is: its files and the manifest describing their features")
    _key(lines, 4, "type", "dir", "dir: the files below one directory, its manifest at the top")
    _key(lines, 4, "args", "", "the dir dataset's arguments")
    _key(lines, 6, "data_dir", _quoted(data_dir), "the directory of the data and its manifest, relative to "
                                                  "this file")
    if pattern:
        _key(lines, 6, "pattern", _quoted(pattern), "which files below data_dir are data files")
    return lines


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _sizes_lines(dataset: Dataset, loader: str, measured: Measured, window) -> list[str]:
    lines: list[str] = []
    files = len(dataset.files)
    _key(lines, 2, "target_batch_size", str(BATCH_SIZE), "examples per batch: a common start; larger batches "
                                                          "train faster per example and need more memory")
    _key(lines, 2, "drop_remainder", "false", "false: the last batch of each pass may be smaller, so no example "
                                              "is left out; true gives every batch the same size and drops the "
                                              "rest")
    _key(lines, 2, "epochs", "1", "one pass over the data per iteration of the dataset: Keras fit(epochs=N) "
                                  "iterates it N times; null repeats forever (then give fit steps_per_epoch)")
    buffer, why = read_buffer(measured)
    _key(lines, 2, "num_read_buffer_bytes", str(buffer), f"{why} (the largest file has "
                                                          f"{count(measured.largest_file, 'byte')})")
    _key(lines, 2, "num_prefetch", "-1", "batches prepared ahead of the model: -1 lets tf.data tune it")
    _key(lines, 2, "shuffle", "true", "shuffle the file order and the examples (training wants it; false for "
                                      "evaluation)")
    elements, why = shuffle_elements(loader, measured, window)
    _key(lines, 2, "num_shuffle_buffer_elements", str(elements), f"examples the shuffle buffer holds: {why}")
    _key(lines, 2, "num_filenames_shuffle_buffer", str(min(files, MAX_BUFFER_ELEMENTS)),
         f"file names shuffled: all {files}")
    _key(lines, 2, "num_mix_files", str(min(files, MIX_FILES)),
         f"files read at once so that their examples mix: {'all' if files <= MIX_FILES else 'at most'} "
         f"{min(files, MIX_FILES)} (each holds a read buffer)")
    _key(lines, 2, "seed", str(SEED), "the same order on every run; null gives a new order each run")
    if window is not None:
        _key(lines, 2, "min_window", str(window[0]), window[2])
        _key(lines, 2, "max_window", str(window[1]), f"{kind(loader).window_unit} per window at most")
    return lines


def _feature_lines(chosen: list[ManifestFeature], loader: str, window, names: dict[str, str]) -> list[str]:
    renamed = any(names[f.name] != f.name for f in chosen)
    lines = _comment("the features read from the records (from_name, as stored), each the tensor to_name "
                     + ("(the stored name, its characters a Keras name cannot hold, such as /, made _) "
                        if renamed else "(the same name) ")
                     + "with the dtype and shape per record the manifest says", 2)
    lines.append("  primary_features:")
    for feature in chosen:
        shape = "[" + ", ".join(["null"] * feature.ragged + list(map(str, feature.record_shape))) + "]"
        lines.append(f"    - {{from_name: {_quoted(feature.name)}, to_name: {_quoted(names[feature.name])}}}  "
                     f"# {feature.dtype} {shape}{_per_step(feature)}")
    varying = [names[f.name] for f in chosen if f.var_len]
    if varying or (window is not None and window[0] != window[1]):
        why = (f"{', '.join(varying)} {'vary' if len(varying) > 1 else 'varies'} in length"
               if varying else f"windows of {window[0]} to {window[1]} {kind(loader).window_unit} vary in length")
        _key(lines, 2, "padding", "true", f"{why}: every tensor is padded with zeros (the empty string for "
                                          "strings) to the longest in its batch; a list of {tensor, value} "
                                          "chooses another value per tensor")
    return lines


@dataclasses.dataclass(frozen=True)
class Images:
    """What the records looked at show of a feature holding one encoded image per record."""

    name: str  # the stored feature name
    formats: tuple[str, ...]  # 'JPEG', 'PNG', ... as found
    shape: tuple[int, int, int]  # (height, width, channels) of the first record's image
    first: str  # 'path: record N' of that record, the path relative to the data directory
    other: tuple[int, int, str] | None  # (height, width, place) of the first image of another size
    records: int  # records looked at


def found_images(dataset: Dataset, chosen: list[ManifestFeature]) -> list[Images]:
    """The chosen features whose every value, in the first IMAGE_RECORDS records (SAMPLE_RECORDS of each file
    in turn), is one encoded image (by the bytes' first ones), with their sizes as the images' headers give them."""
    candidates = [f.name for f in chosen if f.deserialize_type == "string" and not f.var_len and not f.record_shape]
    shapes: dict[str, list] = {name: [] for name in candidates}
    top = os.path.dirname(dataset.manifest.path)
    for path in dataset.files:
        if not candidates or len(shapes[candidates[0]]) >= IMAGE_RECORDS:
            break
        for index, _, serialized in read_records(path, dataset.manifest.compression, limit=SAMPLE_RECORDS):
            context = tf.train.SequenceExample.FromString(serialized).context.feature
            for name in candidates:
                data = context[name].bytes_list.value[0] if len(context[name].bytes_list.value) == 1 else b""
                place = naming.record_name(os.path.relpath(path, top).replace(os.sep, "/"), index)
                shapes[name].append((image_format(data), image_shape(data), place))
    found = []
    for name, seen in shapes.items():
        if not seen or any(shape is None for _, shape, _ in seen):
            continue
        (height, width, channels), first = seen[0][1], seen[0][2]
        other = next(((h, w, place) for _, (h, w, _), place in seen if (h, w) != (height, width)), None)
        found.append(Images(name, tuple(sorted({kind for kind, _, _ in seen})), (height, width, channels), first,
                            other, len(seen)))
    return found


def _image_lines(images: list[Images], names: dict[str, str]) -> list[str]:
    """The processing_steps decoding each feature of encoded images (none: no lines)."""
    if not images:
        return []
    lines = _comment("steps run on each batch in order, each replacing its tensor", 2)
    lines.append("  processing_steps:")
    for image in images:
        height, width, stored = image.shape
        channels = {1: 1, 2: 1, 3: 3, 4: 4}.get(stored, 3)
        kinds = " and ".join(image.formats)
        why = (f"{image.name} holds {kinds} images, {height} x {width} pixels with {count(stored, 'channel')} in "
               f"{image.first}: decode_image gives float32 pixels [{height}, {width}, {channels}] scaled to [0, 1] "
               "(dtype uint8 keeps 0 to 255 in a quarter of the memory)")
        if image.other is None:
            size = f"size: [{height}, {width}]"
            why += f"; every image of the {count(image.records, 'record')} looked at has that size"
        else:
            size = f"resize: [{height}, {width}]"
            why += (f"; sizes differ ({image.other[0]} x {image.other[1]} in {image.other[2]}), so every image is "
                    "resized to the first's (bilinear; crop keeps the central part instead)")
        lines.extend(_comment(why, 4))
        lines.append(f"    - {{tensor: {_quoted(names[image.name])}, type: decode_image, args: {{channels: {channels}, "
                     f"{size}, dtype: float32}}}}")
    return lines
