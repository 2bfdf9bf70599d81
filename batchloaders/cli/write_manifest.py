"""``batchloaders manifest DIR``: write or update ``DIR/__manifest__.json`` from the data files under DIR.

Every data file (those ``--pattern`` matches, by default the ``*.tfrecords``,
``*.tfrecord``, ``*.tfrec`` and ``*-00000-of-00002`` shards a ``dir`` dataset finds) is read
whole, with a progress line on stderr, and listed in ``files`` with its
name (relative to DIR, '/' between directories), ``num_records``,
``size_bytes`` and ``sha256``. A damaged file (see :mod:`batchloaders.cli.verify`)
stops the command: no manifest is written with counts that are wrong.

The keys an existing manifest holds (``compression``, ``allow_var_len``,
``features`` and any other) are kept. When it declares no features, or there
is no manifest yet, the features are inferred from the first records of every
file (:mod:`batchloaders.prepare.infer`), along with ``allow_var_len``;
``compression`` is told from the files' bytes when the manifest does not
give it. ``--raw NAME=DTYPE[SHAPE]`` declares a bytes feature a raw tensor,
in an existing manifest too, once the records looked at agree with it. The new
manifest is checked as ``validate`` would before it
replaces the old one (written to a temporary file, then renamed; the temporary
files of a run that was killed while writing are removed by the next run). The summary
(long lines wrapped here) ends with what was guessed, for the user to check::

    $ batchloaders manifest data/mnist
    features inferred from 128 records of 2 files (tf.train.Example, compression null): image (string []),
        label (int64 [])
    wrote data/mnist/__manifest__.json: 2 files, 60,000 records, 47,040,000 bytes
    image: every value is 784 bytes: probably a raw tensor (uint8, int8 or bool [784] or [28, 28]; ...);
        declare it with --raw 'image=uint8[28,28]'
    guessed: compression null (told from the files' bytes)
    guessed: allow_var_len false (tf.train.Example records: none of the 128 records looked at holds ...)
    guessed: image: string [] (a bytes_list of 1 value in every record looked at)
    guessed: label: int64 [] (an int64_list of 1 value in every record looked at)

In a data directory TFDS prepared, the features are TFDS's own description of
them (``features.json``, read by :mod:`batchloaders.prepare.tfds_info`), and
``--split NAME`` lists the files of that split only.

Exit status: 0 when the manifest was written, 2 for a wrong ``--pattern``,
``--raw`` or ``--split``, 1 otherwise.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
import time
from typing import Iterator, Sequence, TextIO

import tensorflow as tf

from batchloaders.errors import BatchLoaderError, ManifestError, Problem
from batchloaders.config.datasets import DEFAULT_PATTERN, files_there, pattern_matcher, shorten, url_scheme
from batchloaders.core.limits import ITEM_BYTES
from batchloaders.config.document import MANIFEST, parse_text
from batchloaders.config.manifest import MANIFEST_NAME, manifest_from_document
from batchloaders.core.model import COMPRESSIONS
from batchloaders.prepare.infer import (SAMPLE_RECORDS, Inferred, Raw, guess_text, infer, parse_raw, raw_feature,
                                    raw_hint)
from batchloaders.cli.progress import Progress, counted
from batchloaders.prepare import tfds_info
from batchloaders.prepare.beam import Runner, map_elements
from batchloaders.prepare import paths
from batchloaders.prepare.files import TEMP_NAME, TEMP_PREFIX, located, to_json
from batchloaders.read.records import (ReadError, compression_name, count, read_records, scan_file, shown,
                                        sniff, tf_message)

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2  # as the other commands (cli.main)
KEY_ORDER = ("compression", "allow_var_len", "features", "files")


class Refused(Exception):
    """The manifest cannot be written; the message (possibly several lines) says why.

    Args:
        message: why, possibly several lines.
        problems: the data files' problems, located, when they are why (the Python API raises them as a
            DataError).
    """

    def __init__(self, message: str, problems: Sequence[Problem] = ()):
        super().__init__(message)
        self.problems = tuple(problems)


class Usage(Refused):
    """A ``--pattern`` or ``--raw`` the command cannot use: a usage error (exit 2)."""


@dataclasses.dataclass(frozen=True)
class Choices:
    """What ``batchloaders manifest`` is told besides the directory.

    Attributes:
        pattern: the data files to list (``--pattern``). None: those a ``dir`` dataset finds.
        raws: ``NAME=DTYPE[SHAPE]`` declarations of bytes features that are raw tensors (``--raw``).
        split: a TFDS-prepared directory's split whose files the manifest lists (see
            :mod:`batchloaders.prepare.tfds_info`).
        runner: the Beam runner that reads the files, one element per file; None: this process reads them.
    """

    pattern: str | None = None
    raws: tuple[str, ...] = ()
    split: str | None = None
    runner: Runner | None = None


def run(directory: str, out: TextIO | None = None, err: TextIO | None = None, *, pattern: str | None = None,
        raws: Sequence[str] = (), split: str | None = None) -> int:
    """Write or update ``directory/__manifest__.json`` from the data files under it (``batchloaders manifest``).

    Problems are printed, not raised.

    Args:
        directory: the dataset directory.
        out: where the summary goes. Default: stdout.
        err: where problems and progress go. Default: stderr.
        pattern: the data files to list (``--pattern``). Default: those a ``dir`` dataset finds.
        raws: ``NAME=DTYPE[SHAPE]`` declarations of bytes features that are raw tensors (``--raw``).
        split: a TFDS-prepared directory's split whose files the manifest lists (see
            :mod:`batchloaders.prepare.tfds_info`).

    Returns:
        The exit status: 0 when written, 2 for a ``pattern``, ``raws`` or ``split`` that is wrong, 1 for any
        other problem.
    """
    return run_with(directory, Choices(pattern, tuple(raws), split), out, err)


def run_with(directory: str, choices: Choices, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """:func:`run` with its choices in one value, a Beam runner among them (``batchloaders manifest --runner``).

    Args:
        directory: the dataset directory.
        choices: the pattern, raw declarations, split and runner.
        out: where the summary goes. Default: stdout.
        err: where problems and progress go. Default: stderr.

    Returns:
        The exit status, as :func:`run` returns it.
    """
    out, err = out or sys.stdout, err or sys.stderr
    try:
        lines = write(directory, err, pattern=choices.pattern, raws=raw_specs(choices.raws), split=choices.split,
                      runner=choices.runner)
    except (Refused, BatchLoaderError) as error:
        for line in str(error).splitlines():
            print(f"batchloaders manifest: error: {line}", file=err)
        return EXIT_USAGE if isinstance(error, Usage) else EXIT_INVALID
    for line in lines:
        print(line, file=out)
    return EXIT_OK


def raw_specs(texts: Sequence[str]) -> list[Raw]:
    """The ``--raw`` declarations; Usage naming the first one that is malformed or repeats a feature."""
    specs: dict[str, Raw] = {}
    for text in texts:
        try:
            raw = parse_raw(text)
        except ValueError as error:
            raise Usage(f"--raw {text!r}: {error}") from None
        if raw.name in specs:
            raise Usage(f"--raw {text!r}: feature {raw.name!r} is already declared by --raw {specs[raw.name].text!r}: "
                        "expected each feature once")
        specs[raw.name] = raw
    return list(specs.values())


def data_files(directory: str, pattern: str | None = None) -> list[str]:
    """The data files under ``directory`` that ``pattern`` (by default DEFAULT_PATTERN) matches, in the order a
    ``dir`` dataset reads them, the manifest and its temporary files left out; Refused if there are none."""
    try:
        matches = pattern_matcher(pattern or DEFAULT_PATTERN)
    except ValueError as error:
        raise Usage(f"--pattern {shorten(pattern)}: {error}") from None
    remote = url_scheme(directory) is not None
    try:
        if not remote:
            os.stat(directory)
    except OSError as error:
        raise Refused(f"{directory}: {error.strerror or error}: expected a dataset directory") from None
    if not paths.isdir(directory):
        raise Refused(f"{directory} is not a directory" + (" or is not there" if remote else "")
                      + ": expected a dataset directory")
    files, unreadable = paths.walk(directory, lambda relative: matches(relative) and not _ours(relative))
    if unreadable:
        raise Refused("\n".join(f"{directory}: {problem}" for problem in unreadable))
    if not files:
        there = "" if remote else files_there(directory)
        raise Refused(f"no data file under {directory} (files matching {pattern or DEFAULT_PATTERN})"
                      + (f": {there}" if there else ""))
    return files


def _ours(relative: str) -> bool:
    """Whether a path relative to the dataset directory is its manifest or a temporary one of this command."""
    return relative == MANIFEST_NAME or TEMP_NAME.fullmatch(relative) is not None


def _existing(path: str) -> dict:
    """The manifest already there as plain data, {} if there is none."""
    if not paths.exists(path):
        return {}
    try:
        data = paths.load_document(path).data
    except BatchLoaderError as error:
        raise Refused(f"{error}\nfix or remove the existing manifest first") from None
    if not isinstance(data, dict):
        raise Refused(f"{shown(path)}: $: found a JSON {type(data).__name__}: expected an object; fix or remove "
                      "the existing manifest first")
    return data


def _compression(directory: str, files: Sequence[str], existing: dict) -> str | None:
    """The manifest's compression if it gives one, else the one the files' bytes show."""
    if "compression" in existing:
        compression = existing["compression"]
        if compression not in COMPRESSIONS:
            raise Refused(f"the existing manifest says compression {json.dumps(compression)}: expected null, "
                          "'zlib' or 'gzip'")
        return compression
    found: dict[str | None, str] = {}
    for path in files:
        kind = sniff(path, directory)
        if kind.kind == "other":
            raise Refused(f"{shown(path)}: not a TFRecord file: {kind.detail}")
        if kind.kind != "empty":
            found.setdefault(kind.compression, path)
    if len(found) > 1:
        raise Refused("the data files are not all compressed alike: " + "; ".join(
            f"{shown(path)} is {sniff(path, None).describe()}" for path in found.values()))
    return next(iter(found), None)


def _samples(files: Sequence[str], compression: str | None) -> Iterator[tuple[str, int, bytes]]:
    for path in files:
        try:
            for index, _, serialized in read_records(path, compression, limit=SAMPLE_RECORDS):
                yield path, index, serialized
        except ReadError:
            pass  # cannot happen after a clean scan, unless the file changed since


def _feature_text(feature: dict) -> str:
    shape = "[" + ", ".join("null" if dim is None else str(dim) for dim in feature["shape"]) + "]"
    raw = "raw " if feature["deserialize_type"] == "raw" else ""
    return f"{feature['name']} ({raw}{feature['dtype']} {shape}{', feature list' if feature['var_len'] else ''})"


@dataclasses.dataclass
class _Features:
    """The features and allow_var_len a manifest gets, the summary line, and the notes and guesses printed after."""

    features: list
    allow_var_len: object
    summary: str
    notes: list[str] = dataclasses.field(default_factory=list)  # raw tensor hints
    guessed: list[str] = dataclasses.field(default_factory=list)  # "guessed: ..." lines, without the prefix


def write(directory: str, err: TextIO, *, pattern: str | None = None, raws: Sequence[Raw] = (),
          split: str | None = None, runner: Runner | None = None) -> list[str]:
    """Write the manifest; return the summary lines. Left-out features are reported on ``err``.

    In a TFDS-prepared directory the features are TFDS's own (``features.json``), and ``split`` chooses the
    files of one split (Usage when the directory is not one, a ``pattern`` is given too, or no split has the name).
    """
    started = time.time()
    tfds = tfds_info.read_info(directory) if tfds_info.is_tfds_dir(directory) else None
    pattern = split_files(directory, tfds, split, pattern)
    files = data_files(directory, pattern)
    for name in paths.remove_leftovers(directory, started):
        print(f"batchloaders manifest: removed {name}, the temporary manifest of a run stopped while writing",
              file=err)
    manifest_path = paths.join(directory, MANIFEST_NAME)
    existing = _existing(manifest_path)
    compression = _compression(directory, files, existing)
    entries = _kept_indexes(_entries(directory, files, compression, err, runner), existing)
    declared = existing.get("features")
    if isinstance(declared, list) and declared:
        described = _kept(existing, _samples(files, compression), raws)
    elif tfds is not None:
        described = _from_tfds(tfds, directory, _samples(files, compression), raws, err)
        described.notes += _count_notes(tfds, entries)
    else:
        described = _inferred(_samples(files, compression), raws, err, files=files, compression=compression,
                              manifest_path=manifest_path)
    if "compression" not in existing:
        described.guessed.insert(0, f"compression {compression_name(compression)} (told from the files' bytes)")

    data = {"compression": compression, "allow_var_len": described.allow_var_len, "features": described.features,
            "files": entries}
    data.update((key, value) for key, value in existing.items() if key not in KEY_ORDER)
    write_valid(manifest_path, data, directory, "no manifest written")
    records = sum(entry["num_records"] for entry in entries)
    size = sum(entry["size_bytes"] for entry in entries)
    return [described.summary,
            f"wrote {shown(manifest_path)}: {count(len(files), 'file')}, {count(records, 'record')}, "
            f"{count(size, 'byte')}",
            *described.notes, *(f"guessed: {line}" for line in described.guessed)]


def split_files(directory: str, tfds: tfds_info.TfdsInfo | None, split: str | None,
                pattern: str | None) -> str | None:
    """The pattern of the files to list: ``pattern``, or the glob of a TFDS ``split``'s files.

    Args:
        directory: the dataset directory.
        tfds: TFDS's description of it, None when it holds none.
        split: the split named by ``--split``, or None.
        pattern: the glob named by ``--pattern``, or None.

    Returns:
        The pattern (None: the default one).

    Raises:
        Usage: ``split`` with ``pattern``, in a directory without TFDS's files, or naming no split there.
    """
    if split is None:
        return pattern
    if pattern is not None:
        raise Usage(f"--split {split!r} and --pattern {shorten(pattern)} both choose the data files: expected one "
                    "of them")
    if tfds is None:
        raise Usage(f"--split {split!r}: {directory} holds no {tfds_info.INFO_NAME} and {tfds_info.FEATURES_NAME} "
                    "as TFDS writes them: expected a data directory TFDS prepared (--pattern chooses the files of "
                    "other directories)")
    try:
        return tfds_info.split_pattern(tfds, split, directory)
    except ManifestError as error:
        raise Usage(str(error)) from None


def _from_tfds(tfds: tfds_info.TfdsInfo, directory: str, samples: Iterator, raws: Sequence[Raw],
               err: TextIO) -> _Features:
    """The features TFDS's features.json describes; those of TFDS types without a manifest form inferred from
    the records (said on ``err``), those ``raws`` names declared raw."""
    where = shown(os.path.join(directory, tfds_info.FEATURES_NAME))
    features = list(tfds.features)
    guessed = []
    inferred = infer(samples) if tfds.unknown or raws else None
    for unknown in tfds.unknown:
        print(f"batchloaders manifest: {unknown.message(where)}", file=err)
        found = [f for f in inferred.features if f["name"] == unknown.name or f["name"].startswith(unknown.name + "/")]
        for line in inferred.left_out:  # "feature 'name' left out: why"
            if line.startswith((f"feature {unknown.name!r} ", f"feature {unknown.name + '/'!r}"[:-1])):
                print(f"batchloaders manifest: {line}", file=err)
        features += found
        guessed += [guess_text(feature, inferred.seen[feature["name"]]) for feature in found]
    declared = {raw.name: _raw_feature(raw, inferred) for raw in raws}
    features = [declared.get(feature["name"], feature) for feature in features]
    for feature in features:
        if feature["name"] in declared:
            guessed += _endian_guess(feature)
    summary = (f"features from {where} (TFDS dataset {tfds.name}, tf.train.Example): "
               + ", ".join(map(_feature_text, features)))
    return _Features(features, False, summary, notes=list(tfds.notes), guessed=guessed)


def _count_notes(tfds: tfds_info.TfdsInfo, entries: list[dict]) -> list[str]:
    """A line for each split whose files hold other record counts than dataset_info.json's shardLengths say."""
    lines = []
    for split in tfds.splits.values():
        matches = pattern_matcher(split.pattern)
        counted = tuple(e["num_records"] for e in sorted(entries, key=lambda e: e["name"]) if matches(e["name"]))
        if counted and split.shard_lengths and counted != split.shard_lengths:
            lines.append(f"split {split.name}: the files hold {', '.join(map(str, counted))} records, "
                         f"{tfds_info.INFO_NAME} says {', '.join(map(str, split.shard_lengths))}: the manifest "
                         "has the records counted")
    return lines


def write_valid(manifest_path: str, data: dict, base_dir: str, refused: str) -> None:
    """Write manifest ``data`` to ``manifest_path`` (atomically) if validate would accept it; else Refused,
    ending with ``refused`` (what was not done)."""
    text = to_json(data) + "\n"
    try:
        manifest_from_document(parse_text(text, manifest_path, ManifestError, base_dir=base_dir, fmt="json",
                                          bounds=MANIFEST))
    except BatchLoaderError as error:
        raise Refused(f"{error}\n{refused}: it would be invalid") from None
    paths.put(manifest_path, text, TEMP_PREFIX)


def _entries(directory: str, files: Sequence[str], compression: str | None, err: TextIO,
             runner: Runner | None = None) -> list[dict]:
    """The ``files`` entries of every data file, read whole (one Beam element each on ``runner``); Refused
    naming every problem when any is damaged."""
    if runner is None:
        progress = Progress("manifest", len(files), err)
        try:
            results = [counted(progress, file_entry, path, directory, compression) for path in files]
        finally:
            progress.close()
    else:
        print(f"batchloaders manifest: reading {count(len(files), 'file')} on {runner.name}", file=err)
        results = map_elements(functools.partial(file_entry, directory=paths.absolute(directory),
                                                 compression=compression),
                               [paths.absolute(path) for path in files], runner, label="manifest")
    refuse_problems(files, [found for _, found in results], "no manifest written")
    return [entry for entry, _ in results]


def file_entry(path: str, directory: str, compression: str | None, progress: Progress | None = None
               ) -> tuple[dict | None, list[str]]:
    """One data file read whole: its ``files`` entry (None when it cannot be read) and its problems.

    What ``batchloaders manifest`` does for each file, on this machine or as one Beam element.

    Args:
        path: the data file.
        directory: the dataset directory (the entry's name is relative to it).
        compression: the files' compression (None, 'gzip' or 'zlib').
        progress: a Progress to count on, None for none.

    Returns:
        ``(entry, problems)``; the problems without the file's path in front.
    """
    try:
        scan = scan_file(path, compression, progress=progress, dataset_dir=directory)
    except OSError as error:
        return None, [f"cannot be read ({error.strerror or error})"]
    except tf.errors.OpError as error:  # a URL TensorFlow's file systems cannot read
        return None, [f"cannot be read ({tf_message(error)})"]
    name = paths.relative(path, directory)
    return {"name": name, "num_records": scan.records, "size_bytes": scan.size, "sha256": scan.sha256}, \
        list(scan.problems)


def refuse_problems(files: Sequence[str], found: Sequence[Sequence[str]], refused: str) -> None:
    """Refused naming every problem of the files (``found[i]`` those of ``files[i]``), ending with ``refused``
    (what was not written); nothing when there are none."""
    problems = [(path, line) for path, lines in zip(files, found) for line in lines]
    if problems:
        raise Refused("\n".join([f"{shown(path)}: {line}" for path, line in problems]
                                + [f"{refused}: {count(len(problems), 'problem')} in the data files (see "
                                   "`batchloaders verify`)"]),
                      [located(shown(path), line) for path, line in problems])


def _kept_indexes(entries: list[dict], existing: dict) -> list[dict]:
    """The entries, each keeping the record ``index`` its existing entry records when the data file is unchanged
    (same count, size and SHA-256): the index is still right; a changed file's index is dropped with its entry."""
    old = {e.get("name"): e for e in existing.get("files") or () if isinstance(e, dict)}
    for entry in entries:
        before = old.get(entry["name"], {})
        if "index" in before and all(before.get(key) == entry[key] for key in ("num_records", "size_bytes", "sha256")):
            entry["index"] = before["index"]
    return entries


def _inferred(samples: Iterator, raws: Sequence[Raw], err: TextIO, *, files: Sequence[str], compression: str | None,
              manifest_path: str) -> _Features:
    """The features the records show, those ``raws`` names declared raw; what was guessed, and raw tensor hints."""
    inferred = infer(samples)
    for line in inferred.left_out:
        print(f"batchloaders manifest: {line}", file=err)
    declared = {raw.name: _raw_feature(raw, inferred) for raw in raws}
    if not inferred.features:
        raise Refused(f"no feature could be inferred from the {count(inferred.records, 'record')} looked at "
                      f"(the first {SAMPLE_RECORDS} of each file); declare the features in {manifest_path}")
    features = [declared.get(feature["name"], feature) for feature in inferred.features]
    kind = "tf.train.SequenceExample" if inferred.allow_var_len else "tf.train.Example"
    described = _Features(features, inferred.allow_var_len, (
        f"features inferred from {count(inferred.records, 'record')} of {count(len(files), 'file')} "
        f"({kind}, compression {compression_name(compression)}): " + ", ".join(map(_feature_text, features))),
        guessed=[_var_len_guess(inferred)])
    for feature in features:
        item = inferred.seen[feature["name"]]
        if feature["name"] in declared:
            described.guessed += _endian_guess(feature)
        else:
            described.notes += filter(None, [raw_hint(feature["name"], item)])
            described.guessed.append(guess_text(feature, item))
    return described


def _kept(existing: dict, samples: Iterator, raws: Sequence[Raw]) -> _Features:
    """The features the existing manifest declares, those ``raws`` names declared raw instead."""
    features, allow_var_len = list(existing["features"]), existing.get("allow_var_len")
    inferred = infer(samples) if allow_var_len is None or raws else None
    guessed = []
    if allow_var_len is None:
        allow_var_len = inferred.allow_var_len
        guessed.append(_var_len_guess(inferred))
    names = [f.get("name") if isinstance(f, dict) else None for f in features]
    shown_names = ["?" if name is None else str(name) for name in names]
    for raw in raws:
        if raw.name not in names:
            raise Usage(f"--raw {raw.text!r}: the existing manifest declares no feature {raw.name!r}: expected one "
                        f"of {', '.join(shown_names)}")
        at = names.index(raw.name)
        old = features[at]
        features[at] = _redeclared(old, _raw_feature(raw, inferred))
        shown_names[at] = _feature_text(features[at]) + " from --raw"
        if _raw_endian(old) is None:
            guessed += _endian_guess(features[at])
    return _Features(features, allow_var_len, f"features kept from the existing manifest: {', '.join(shown_names)}",
                     guessed=guessed)


def _raw_feature(raw: Raw, inferred: Inferred) -> dict:
    try:
        return raw_feature(raw, inferred)
    except ValueError as error:
        raise Usage(f"--raw {raw.text!r}: {error}") from None


def _redeclared(old: dict, new: dict) -> dict:
    """A declared feature made raw: its keys in their order, its byte order kept when it was raw already."""
    merged = {**old, **new}
    if _raw_endian(old):
        merged["deserialize_args"] = {**new["deserialize_args"], "endian": _raw_endian(old)}
    return merged


def _raw_endian(feature: dict) -> str | None:
    """The byte order a declared raw feature gives, None for any other."""
    args = feature.get("deserialize_args") if feature.get("deserialize_type") == "raw" else None
    endian = args.get("endian") if isinstance(args, dict) else None
    return endian if endian in ("little", "big") else None


def _var_len_guess(inferred: Inferred) -> str:
    if inferred.allow_var_len:
        return "allow_var_len true (tf.train.SequenceExample records: some records looked at hold feature lists)"
    return (f"allow_var_len false (tf.train.Example records: none of the {count(inferred.records, 'record')} looked "
            "at holds feature lists)")


def _endian_guess(feature: dict) -> list[str]:
    """The byte order of a raw feature's values of more than one byte is not in the data: little unless said."""
    if ITEM_BYTES[feature["dtype"]] == 1 or feature["deserialize_args"]["endian"] != "little":
        return []
    return [f"{feature['name']}: little-endian {feature['dtype']} (deserialize_args.endian: say \"big\" if the "
            "bytes were written big-endian)"]
