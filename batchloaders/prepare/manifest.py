"""Writing or updating a dataset directory's ``__manifest__.json`` from its data files (``batchloaders manifest``,
``batchloaders.write_manifest``).

Every data file (those ``pattern`` matches, by default those a ``dir`` dataset finds) is read whole, here or as
one Apache Beam element, and listed in ``files`` with its name (relative to the directory, '/' between
directories), ``num_records``, ``size_bytes`` and ``sha256``; a damaged file stops the run. The keys an existing
manifest holds are kept; when it declares no features they are inferred from the first records of every file
(:mod:`batchloaders.prepare.infer`), or, in a directory TFDS prepared, read from TFDS's own description
(:mod:`batchloaders.prepare.tfds_info`). The new manifest is checked as ``validate`` would before it replaces
the old one. What was inferred or guessed is part of the result, for the user to check.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from typing import Iterator, Sequence

import tensorflow as tf

from batchloaders.errors import BatchLoaderError, ConfigError, ManifestError, Problem
from batchloaders.config.datasets import DEFAULT_PATTERN, files_there, pattern_matcher, shorten, url_scheme
from batchloaders.config.document import MANIFEST, parse_text
from batchloaders.config.manifest import MANIFEST_NAME, manifest_from_document
from batchloaders.core.limits import ITEM_BYTES
from batchloaders.core.model import COMPRESSIONS
from batchloaders.prepare import paths, tfds_info
from batchloaders.prepare.beam import Runner, map_elements
from batchloaders.prepare.files import TEMP_NAME, TEMP_PREFIX, to_json
from batchloaders.prepare.infer import SAMPLE_RECORDS, Inferred, Raw, guess_text, infer, raw_feature, raw_hint
from batchloaders.prepare.refused import ARGUMENTS, InvalidExisting, InvalidResult, refuse_problems
from batchloaders.prepare.report import Counter, Reporter, counted
from batchloaders.read.records import (ReadError, compression_name, count, read_records, scan_file, shown,
                                        sniff, tf_message)

KEY_ORDER = ("compression", "allow_var_len", "features", "files")
NOTHING = Reporter()


@dataclasses.dataclass(frozen=True)
class ManifestWritten:
    """What :func:`write_manifest` wrote, and what it inferred or guessed for the user to check.

    Attributes:
        path: the manifest written.
        files: the data files it lists.
        records: their records.
        size_bytes: their bytes.
        features: where the features come from, and each one (one line).
        notes: further lines: raw tensor hints, TFDS's record counts that disagree with the files'.
        guessed: what was guessed (compression, allow_var_len, each inferred feature), one a line.
    """

    path: str
    files: int
    records: int
    size_bytes: int
    features: str
    notes: tuple[str, ...] = ()
    guessed: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """The summary the command prints: the features, what was written, the notes, then what was guessed.

        Returns:
            The lines, without line ends.
        """
        return [self.features,
                f"wrote {shown(self.path)}: {count(self.files, 'file')}, {count(self.records, 'record')}, "
                f"{count(self.size_bytes, 'byte')}",
                *self.notes, *(f"guessed: {line}" for line in self.guessed)]


def data_files(directory: str, pattern: str | None = None) -> list[str]:
    """The data files of a dataset directory, in the order a ``dir`` dataset reads them.

    Args:
        directory: the dataset directory, local or a URL.
        pattern: a glob relative to it. None: DEFAULT_PATTERN, the files a ``dir`` dataset finds.

    Returns:
        The files ``pattern`` matches, the manifest and its temporary files left out.

    Raises:
        ConfigError: ``pattern`` is not a glob (located at the argument ``pattern``).
        ManifestError: ``directory`` is not a readable directory, or holds no file that matches.
    """
    try:
        matches = pattern_matcher(pattern or DEFAULT_PATTERN)
    except ValueError as error:
        raise ConfigError(Problem(ARGUMENTS, "pattern", f"{shorten(pattern)}: {error}")) from None
    remote = url_scheme(directory) is not None
    try:
        if not remote:
            os.stat(directory)
    except OSError as error:
        raise ManifestError(Problem(directory, "file", f"{error.strerror or error}: expected a dataset directory")
                            ) from None
    if not paths.isdir(directory):
        raise ManifestError(Problem(directory, "directory", f"{directory} is not a directory"
                                    + (" or is not there" if remote else "") + ": expected a dataset directory"))
    files, unreadable = paths.walk(directory, lambda relative: matches(relative) and not _ours(relative))
    if unreadable:
        raise ManifestError([Problem(directory, "file", problem) for problem in unreadable])
    if not files:
        there = "" if remote else files_there(directory)
        raise ManifestError(Problem(directory, "directory", f"no data file under {directory} (files matching "
                                    f"{pattern or DEFAULT_PATTERN})" + (f": {there}" if there else "")))
    return files


def _ours(relative: str) -> bool:
    """Whether a path relative to the dataset directory is its manifest or a temporary one of this command."""
    return relative == MANIFEST_NAME or TEMP_NAME.fullmatch(relative) is not None


def existing_manifest(path: str) -> dict:
    """The manifest already there as plain data, {} if there is none; InvalidExisting when it cannot be read."""
    if not paths.exists(path):
        return {}
    try:
        data = paths.load_document(path).data
    except BatchLoaderError as error:
        raise InvalidExisting(error.problems) from None
    if not isinstance(data, dict):
        raise ManifestError(Problem(shown(path), "$", f"found a JSON {type(data).__name__}: expected an object; "
                                    "fix or remove the existing manifest first"))
    return data


def _compression(directory: str, files: Sequence[str], existing: dict, manifest_path: str) -> str | None:
    """The manifest's compression if it gives one, else the one the files' bytes show."""
    if "compression" in existing:
        compression = existing["compression"]
        if compression not in COMPRESSIONS:
            raise ManifestError(Problem(manifest_path, "manifest", "the existing manifest says compression "
                                        f"{json.dumps(compression)}: expected null, 'zlib' or 'gzip'"))
        return compression
    found: dict[str | None, str] = {}
    for path in files:
        kind = sniff(path, directory)
        if kind.kind == "other":
            raise ManifestError(Problem(shown(path), "file", f"not a TFRecord file: {kind.detail}"))
        if kind.kind != "empty":
            found.setdefault(kind.compression, path)
    if len(found) > 1:
        raise ManifestError(Problem(directory, "files", "the data files are not all compressed alike: " + "; ".join(
            f"{shown(path)} is {sniff(path, None).describe()}" for path in found.values())))
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


def write_manifest(directory: str, *, pattern: str | None = None, raws: Sequence[Raw] = (),
                   runner: Runner | None = None, reporter: Reporter = NOTHING) -> ManifestWritten:
    """Write or update ``directory/__manifest__.json`` from the data files under it.

    In a directory TFDS prepared the features are TFDS's own (``features.json``); elsewhere those an existing
    manifest declares are kept, or inferred from the records when it declares none.

    Args:
        directory: the dataset directory, local or a URL.
        pattern: the data files to list, a glob relative to ``directory``. None: those a ``dir`` dataset finds.
        raws: bytes features to declare raw tensors.
        runner: the Beam runner that reads the files, one element per file; None: this process reads them.
        reporter: where notes (features left out, leftovers removed) and progress go; by default nowhere.

    Returns:
        What was written, and what was inferred or guessed.

    Raises:
        DataError: a data file is damaged or cannot be read (DamagedFiles; nothing is written).
        ManifestError: no data file, an existing manifest that is invalid (InvalidExisting), or a new one that
            would be (InvalidResult).
        ConfigError: a wrong ``pattern`` or ``raws`` (located at the argument).
    """
    started = time.time()
    tfds = tfds_info.read_info(directory) if tfds_info.is_tfds_dir(directory) else None
    files = data_files(directory, pattern)
    for name in paths.remove_leftovers(directory, started):
        reporter.note("manifest", f"removed {name}, the temporary manifest of a run stopped while writing")
    manifest_path = paths.join(directory, MANIFEST_NAME)
    existing = existing_manifest(manifest_path)
    compression = _compression(directory, files, existing, manifest_path)
    entries = _kept_indexes(entries_of(directory, files, compression, runner, reporter), existing)
    declared = existing.get("features")
    if isinstance(declared, list) and declared:
        described = _kept(existing, _samples(files, compression), raws)
    elif tfds is not None:
        described = _from_tfds(tfds, directory, _samples(files, compression), raws, reporter)
        described.notes += _count_notes(tfds, entries)
    else:
        described = _inferred(_samples(files, compression), raws, reporter, files=files, compression=compression,
                              manifest_path=manifest_path)
    if "compression" not in existing:
        described.guessed.insert(0, f"compression {compression_name(compression)} (told from the files' bytes)")

    data = {"compression": compression, "allow_var_len": described.allow_var_len, "features": described.features,
            "files": entries}
    data.update((key, value) for key, value in existing.items() if key not in KEY_ORDER)
    write_valid(manifest_path, data, directory, "no manifest written")
    return ManifestWritten(manifest_path, len(files), sum(entry["num_records"] for entry in entries),
                           sum(entry["size_bytes"] for entry in entries), described.summary,
                           tuple(described.notes), tuple(described.guessed))


def _from_tfds(tfds: tfds_info.TfdsInfo, directory: str, samples: Iterator, raws: Sequence[Raw],
               reporter: Reporter) -> _Features:
    """The features TFDS's features.json describes; those of TFDS types without a manifest form inferred from
    the records (noted), those ``raws`` names declared raw."""
    where = shown(os.path.join(directory, tfds_info.FEATURES_NAME))
    features = list(tfds.features)
    guessed = []
    inferred = infer(samples) if tfds.unknown or raws else None
    for unknown in tfds.unknown:
        reporter.note("manifest", unknown.message(where))
        found = [f for f in inferred.features if f["name"] == unknown.name or f["name"].startswith(unknown.name + "/")]
        for line in inferred.left_out:  # "feature 'name' left out: why"
            if line.startswith((f"feature {unknown.name!r} ", f"feature {unknown.name + '/'!r}"[:-1])):
                reporter.note("manifest", line)
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


def write_valid(manifest_path: str, data: dict, base_dir: str, outcome: str) -> None:
    """Write manifest ``data`` to ``manifest_path`` (atomically) if validate would accept it.

    Args:
        manifest_path: where.
        data: the manifest as plain data.
        base_dir: the directory its file names are relative to.
        outcome: what is not done when it is invalid (``no manifest written``).

    Raises:
        InvalidResult: the manifest would be invalid; nothing is written.
    """
    text = to_json(data) + "\n"
    try:
        manifest_from_document(parse_text(text, manifest_path, ManifestError, base_dir=base_dir, fmt="json",
                                          bounds=MANIFEST))
    except BatchLoaderError as error:
        raise InvalidResult(error.problems, outcome) from None
    paths.put(manifest_path, text, TEMP_PREFIX)


def entries_of(directory: str, files: Sequence[str], compression: str | None, runner: Runner | None = None,
               reporter: Reporter = NOTHING) -> list[dict]:
    """The ``files`` entries of data files, each read whole.

    Args:
        directory: the dataset directory (the entries' names are relative to it).
        files: the data files.
        compression: their compression (None, 'gzip' or 'zlib').
        runner: the Beam runner that reads them, one element per file; None: this process reads them.
        reporter: where progress goes.

    Returns:
        The entries, in the files' order.

    Raises:
        DamagedFiles: naming every problem, when any file is damaged or cannot be read.
    """
    if runner is None:
        progress = reporter.progress("manifest", len(files))
        try:
            results = [counted(progress, file_entry, path, directory, compression) for path in files]
        finally:
            progress.close()
    else:
        reporter.note("manifest", f"reading {count(len(files), 'file')} on {runner.name}")
        results = map_elements(functools.partial(file_entry, directory=paths.absolute(directory),
                                                 compression=compression),
                               [paths.absolute(path) for path in files], runner, label="manifest")
    refuse_problems(files, [found for _, found in results], "no manifest written")
    return [entry for entry, _ in results]


def file_entry(path: str, directory: str, compression: str | None, progress: Counter | None = None
               ) -> tuple[dict | None, list[str]]:
    """One data file read whole: its ``files`` entry (None when it cannot be read) and its problems.

    What ``batchloaders manifest`` does for each file, on this machine or as one Beam element.

    Args:
        path: the data file.
        directory: the dataset directory (the entry's name is relative to it).
        compression: the files' compression (None, 'gzip' or 'zlib').
        progress: a Counter to count on, None for none.

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


def _kept_indexes(entries: list[dict], existing: dict) -> list[dict]:
    """The entries, each keeping the record ``index`` its existing entry records when the data file is unchanged
    (same count, size and SHA-256): the index is still right; a changed file's index is dropped with its entry."""
    old = {e.get("name"): e for e in existing.get("files") or () if isinstance(e, dict)}
    for entry in entries:
        before = old.get(entry["name"], {})
        if "index" in before and all(before.get(key) == entry[key] for key in ("num_records", "size_bytes", "sha256")):
            entry["index"] = before["index"]
    return entries


def _inferred(samples: Iterator, raws: Sequence[Raw], reporter: Reporter, *, files: Sequence[str],
              compression: str | None, manifest_path: str) -> _Features:
    """The features the records show, those ``raws`` names declared raw; what was guessed, and raw tensor hints."""
    inferred = infer(samples)
    for line in inferred.left_out:
        reporter.note("manifest", line)
    declared = {raw.name: _raw_feature(raw, inferred) for raw in raws}
    if not inferred.features:
        raise ManifestError(Problem(manifest_path, "features", "no feature could be inferred from the "
                                    f"{count(inferred.records, 'record')} looked at (the first {SAMPLE_RECORDS} of "
                                    f"each file); declare the features in {manifest_path}"))
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
            raise ConfigError(Problem(ARGUMENTS, "raws", f"{raw.text!r}: the existing manifest declares no feature "
                                      f"{raw.name!r}: expected one of {', '.join(shown_names)}"))
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
        raise ConfigError(Problem(ARGUMENTS, "raws", f"{raw.text!r}: {error}")) from None


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
