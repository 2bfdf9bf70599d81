"""Rewrite a dataset into N shards balanced by record count (``batchloaders reshard SRC DEST --shards N``).

Which record goes where is a function of its position alone. The records of SRC are numbered in the order
of its manifest's ``files`` (of the config's dataset for a config), each file's records in their order,
using the counts the manifest records: position ``p`` of ``T`` records in all. Shard ``k`` of ``N`` gets the
contiguous positions ``[k*T//N, (k+1)*T//N)``, so shard sizes differ by at most one record, each shard keeps
SRC's order, and a shard's records are a few ranges of a few files, which one worker (one Beam element per
shard) reads from their start. Two runs, on any runner, write the same bytes.

Each shard is written under a temporary name in DEST; only when every shard is complete are they renamed,
then their record indexes written, then the manifest, last: a run that is killed leaves no manifest, so no
dataset that looks complete. A source file that cannot be read, is damaged, or holds other records than
its manifest entry says (count, size or SHA-256) is a located DataError, and nothing is left in DEST.
"""
from __future__ import annotations

import bisect
import dataclasses
import hashlib
import os
import uuid
from typing import Callable, Sequence

from batchloaders.errors import ConfigError, DataError, ManifestError, PluginsNotChecked, Problem
from batchloaders.config import datasets
from batchloaders.config.config import load_config
from batchloaders.config.document import MANIFEST, load_file, parse_text
from batchloaders.config.manifest import INDEX_SUFFIX, MANIFEST_NAME, manifest_from_document
from batchloaders.config.schema import schema_check
from batchloaders.core.model import Dataset
from batchloaders.prepare import paths
from batchloaders.prepare.beam import Runner, map_elements
from batchloaders.prepare.files import TEMP_PREFIX as MANIFEST_TEMP, located, to_json
from batchloaders.read.framing import FRAME_BYTES, count
from batchloaders.read.records import CHUNK, TF_COMPRESSION, ReadError, read_problem, read_records, shown

SHARD_NAME = "part-{index:05d}-of-{total:05d}.tfrecords"
TEMP_PREFIX = ".__reshard__."
INDEX_TEMP_PREFIX = ".__index__."  # config.manifest.INDEX_TEMP matches the temporary index names
OUTPUT_COMPRESSIONS = (None, "gzip")
KEY_ORDER = ("compression", "allow_var_len", "features", "files")  # as `batchloaders manifest` writes them


@dataclasses.dataclass(frozen=True)
class Options:
    """How ``reshard`` lays out its output.

    Attributes:
        shards: the number of output files (1 or more).
        compression: None (uncompressed, the default) or 'gzip'.
        index: write each output file's record index (uncompressed output only; gzip output has none).
        overwrite: replace what DEST holds (everything in it is removed first); else a DEST that holds
            anything is refused.
        leave_out_unlisted: reshard the files SRC's manifest lists when SRC holds data files it does not list
            (a warning names them); else those files are a ManifestError, since their records would be lost.
    """

    shards: int
    compression: str | None = None
    index: bool = True
    overwrite: bool = False
    leave_out_unlisted: bool = False

    def __post_init__(self):
        if isinstance(self.shards, bool) or not isinstance(self.shards, int) or self.shards < 1:
            raise ConfigError(Problem("--shards", "$", f"found {self.shards!r}: expected a whole number of "
                                                       "output files, 1 or more"))
        if self.compression not in OUTPUT_COMPRESSIONS:
            raise ConfigError(Problem("--compression", "$", f"found {self.compression!r}: expected none "
                                                            "(uncompressed) or 'gzip'"))


@dataclasses.dataclass(frozen=True)
class SourceFile:
    """One data file of SRC and what its manifest entry says of it."""

    path: str
    num_records: int
    size_bytes: int | None = None
    sha256: str | None = None


@dataclasses.dataclass(frozen=True)
class Source:
    """What SRC describes: its manifest's data (features and other keys), compression and files in order."""

    manifest_path: str
    manifest: dict
    compression: str | None
    files: tuple[SourceFile, ...]


@dataclasses.dataclass(frozen=True)
class Piece:
    """Records ``[first, stop)`` of one source file; ``last``: the piece that ends the file, which checks
    that the file holds no more records and is still the file its manifest entry describes."""

    source: SourceFile
    first: int
    stop: int
    last: bool


@dataclasses.dataclass(frozen=True)
class ShardTask:
    """One output shard: the pieces it copies, in order, and the temporary file it writes."""

    temp: str
    pieces: tuple[Piece, ...]
    read_compression: str | None
    write_compression: str | None
    indexed: bool


@dataclasses.dataclass(frozen=True)
class ShardWritten:
    """What writing one shard gave: its records, size, SHA-256 and index bytes, or the sources' problems
    (``(path, text)`` pairs)."""

    records: int = 0
    size_bytes: int = 0
    sha256: str = ""
    index: bytes | None = None
    problems: tuple[tuple[str, str], ...] = ()


def shard_name(index: int, total: int) -> str:
    """The name of output shard ``index`` (from 0) of ``total``: ``part-00000-of-00003.tfrecords``."""
    return SHARD_NAME.format(index=index, total=total)


def plan(counts: Sequence[int], shards: int) -> list[list[tuple[int, int, int, bool]]]:
    """Which records each shard copies: ``(file, first, stop, last)`` ranges, shard ``k`` the positions
    ``[k*T//N, (k+1)*T//N)`` of the ``T`` records numbered in file order; ``last`` marks the range that ends a
    file. A file of no records is a range of none in the shard its position falls in, so that its end is
    checked too."""
    total = sum(counts)
    bounds = [k * total // shards for k in range(shards + 1)]
    starts = [0]
    for n in counts:
        starts.append(starts[-1] + n)
    out: list[list[tuple[int, int, int, bool]]] = [[] for _ in range(shards)]
    for i, n in enumerate(counts):
        begin, end = starts[i], starts[i + 1]
        first_shard = min(shards - 1, bisect.bisect_right(bounds, begin) - 1)
        for k in range(first_shard, shards):
            lo, hi = max(begin, bounds[k]), min(end, bounds[k + 1])
            if lo < hi or (n == 0 and k == first_shard):
                out[k].append((i, lo - begin, hi - begin if n else 0, hi == end))
            if bounds[k + 1] >= end:
                break
    return out


def load_source(source: str) -> Source:
    """SRC: a dataset directory (its manifest's ``files``, in order) or a loader config (its dataset's files).

    Raises ManifestError when the manifest is invalid or lacks a file's entry, ConfigError for a config's.
    """
    if paths.url_scheme(source) is not None or os.path.isdir(source):
        manifest_path = paths.join(source, MANIFEST_NAME)
        data = _manifest_data(manifest_path, source)
        entries = data.get("files") or []
        if not entries:
            raise ManifestError(Problem(manifest_path, "$.files", "found no files: expected the data files with "
                                                                  "their record counts (run `batchloaders manifest "
                                                                  f"{source}` first)"))
        files = tuple(SourceFile(paths.join(source, e["name"]), e["num_records"], e.get("size_bytes"),
                                 e.get("sha256")) for e in entries)
        return Source(manifest_path, data, data["compression"], files)
    dataset = _config_dataset(source)
    manifest = dataset.manifest
    data = _manifest_data(manifest.path, os.path.dirname(manifest.path))
    files = []
    for path in dataset.files:
        entry = manifest.entry(path) if paths.url_scheme(path) is None else None
        if entry is None:
            raise ManifestError(Problem(manifest.path, "$.files", f"found no entry for {shown(path)}, a data file of "
                                                                  f"the config {source}: expected each file's record "
                                                                  "count (run `batchloaders manifest` first)"))
        files.append(SourceFile(path, entry.num_records, entry.size_bytes, entry.sha256))
    return Source(manifest.path, data, manifest.compression, tuple(files))


def unlisted_files(source: Source, directory: str) -> list[str]:
    """The data files under SRC ``directory`` (those a ``dir`` dataset finds there) that its manifest does not
    list: a reshard of the listed files would leave their records out."""
    found, _ = paths.walk(directory, datasets.pattern_matcher(datasets.DEFAULT_PATTERN))
    listed = {paths.key(f.path) for f in source.files}
    return [path for path in found if paths.key(path) not in listed]


def _check_unlisted(source: Source, directory: str, options: Options, err) -> None:
    """ManifestError naming the data files SRC's manifest does not list, unless ``options.leave_out_unlisted``
    (then a warning on ``err`` names them)."""
    unlisted = unlisted_files(source, directory)
    if not unlisted:
        return
    names = [paths.relative(path, directory) for path in unlisted]
    if options.leave_out_unlisted:
        if err is not None:
            print(f"batchloaders reshard: warning: left out {count(len(names), 'data file')} SRC's manifest does "
                  f"not list ({datasets.quote_entries(names)}), as --leave-out-unlisted asks", file=err)
        return
    raise ManifestError(Problem(source.manifest_path, "$.files", (
        f"found {count(len(names), 'data file')} under {shown(directory)} that the manifest does not list "
        f"({datasets.quote_entries(names)}): their records would be left out of DEST; expected every data file "
        f"listed: run `batchloaders manifest {shown(directory)}` to list them, or pass --leave-out-unlisted to "
        "reshard the listed files only")))


def _manifest_data(manifest_path: str, base_dir: str) -> dict:
    """A manifest's data, checked as ``validate`` checks it (any file system TensorFlow reads)."""
    if not paths.exists(manifest_path):
        raise ManifestError(Problem(manifest_path, "$", "file not found: expected the dataset's manifest (run "
                                                        "`batchloaders manifest` on the directory first)"))
    doc = parse_text(paths.read_bytes(manifest_path).decode("utf-8-sig"), manifest_path, ManifestError,
                     base_dir=base_dir, fmt="json", bounds=MANIFEST)
    manifest_from_document(doc)
    return doc.data


def _config_dataset(config: str) -> Dataset:
    """A config's dataset; its plugins are not imported (reading the data needs none of their types)."""
    try:
        return load_config(config).dataset
    except PluginsNotChecked:
        doc = load_file(config, ConfigError)
        problems, _ = schema_check(doc, "loader_config.schema.json")
        if problems:
            raise ConfigError(problems) from None
        return datasets.resolve(doc.data["args"]["dataset"], doc)


def shard_tasks(source: Source, destination: str, options: Options) -> list[ShardTask]:
    """One task per output shard, writing a temporary file in ``destination``."""
    run = uuid.uuid4().hex[:12]
    ranges = plan([f.num_records for f in source.files], options.shards)
    indexed = options.index and options.compression is None
    return [ShardTask(paths.join(destination, f"{TEMP_PREFIX}{shard_name(k, options.shards)}.{run}.tmp"),
                      tuple(Piece(source.files[i], first, stop, last) for i, first, stop, last in pieces),
                      source.compression, options.compression, indexed)
            for k, pieces in enumerate(ranges)]


def write_shard(task: ShardTask) -> ShardWritten:
    """Write one output shard (on this machine or as one Beam element): copy its pieces into its temporary file.

    Args:
        task: the shard's pieces and temporary file.

    Returns:
        Its records, size, SHA-256 and index bytes; or, when a source file is damaged or disagrees with its
        manifest entry, only the problems (the temporary file then removed).
    """
    tf_io = paths.tf_io()
    offsets: list[int] = []
    at = [0]

    options = tf_io.TFRecordOptions(compression_type=TF_COMPRESSION[task.write_compression])
    problems: list[tuple[str, str]] = []
    with tf_io.TFRecordWriter(task.temp, options) as writer:
        def write(serialized: bytes) -> None:
            writer.write(serialized)
            offsets.append(at[0])
            at[0] += len(serialized) + FRAME_BYTES

        for piece in task.pieces:
            problems += [(piece.source.path, text) for text in copy_piece(piece, task.read_compression, write)]
            if problems:
                break
    if problems:
        paths.remove(task.temp)
        return ShardWritten(problems=tuple(problems))
    size, sha256 = _hashed(task.temp)
    index = None
    if task.indexed:
        from batchloaders.read.record_index import RecordIndex, encode  # deferred: NumPy, for indexed output only
        import numpy as np

        index = encode(RecordIndex(np.asarray(offsets, np.int64), size))
    return ShardWritten(len(offsets), size, sha256, index)


def copy_piece(piece: Piece, compression: str | None, write: Callable[[bytes], None]) -> list[str]:
    """Copy records ``[first, stop)`` of a source file to ``write``; the problems of the file, none when it adds
    up (the piece that ends the file also checks that no record follows and that its bytes are the file its
    manifest entry describes)."""
    import tensorflow as tf  # deferred: the reader's errors

    source, wanted = piece.source, piece.stop - piece.first
    got = 0
    try:
        for index, _, serialized in read_records(source.path, compression,
                                                 limit=piece.stop + 1 if piece.last else piece.stop):
            if index >= piece.stop:
                return [f"it holds more than the {count(source.num_records, 'record')} its manifest entry lists "
                        "(records were added after the manifest was written: run `batchloaders manifest`)"]
            if index >= piece.first:
                write(serialized)
                got += 1
    except ReadError as error:
        return [read_problem(error, compression)]
    except (OSError, tf.errors.OpError) as error:
        return [f"cannot be read ({getattr(error, 'message', None) or getattr(error, 'strerror', None) or error})"]
    if got < wanted:
        return [f"it holds {count(piece.first + got, 'record')}, but its manifest entry lists "
                f"{source.num_records:,} (the file was cut or changed after the manifest was written)"]
    return _entry_problems(source) if piece.last else []


def _entry_problems(source: SourceFile) -> list[str]:
    """Where a source file's size and SHA-256 disagree with its manifest entry (when it records them)."""
    if source.size_bytes is None and source.sha256 is None:
        return []
    size, sha256 = _hashed(source.path)
    if source.size_bytes is not None and size != source.size_bytes:
        return [f"the file is {count(size, 'byte')}, but its manifest entry records {count(source.size_bytes, 'byte')}"
                " (it changed after the manifest was written)"]
    if source.sha256 is not None and sha256 != source.sha256:
        return [f"its SHA-256 is {sha256[:12]}..., but its manifest entry records {source.sha256[:12]}...: its bytes "
                "changed after the manifest was written"]
    return []


def _hashed(path: str) -> tuple[int, str]:
    """A file's size and SHA-256, read through TensorFlow's file systems."""
    digest, size = hashlib.sha256(), 0
    with paths.tf_io().gfile.GFile(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def prepare_destination(destination: str, source: Source, overwrite: bool) -> None:
    """Make DEST an empty directory: refused when it holds anything (our temporary files of a killed run
    aside), unless ``overwrite``; never when SRC's manifest or files lie in it."""
    names = paths.listing(destination)
    ours = [name for name in names if name.startswith(TEMP_PREFIX)]
    others = [name for name in names if name not in ours]
    if others and not overwrite:
        raise ConfigError(Problem(destination, "$", f"found {len(others):,} file(s) or directories in DEST ("
                                                    f"{datasets.quote_entries(others)}): expected an empty or new "
                                                    "directory (--overwrite replaces what it holds)"))
    inside = [p for p in (source.manifest_path, *(f.path for f in source.files)) if _within(p, destination)]
    if inside:
        raise ConfigError(Problem(destination, "$", f"found {shown(inside[0])} of SRC in DEST: expected DEST apart "
                                                    "from SRC (the output would replace its own input)"))
    if others:
        paths.remove_tree(destination)
    for name in ours:
        paths.remove(paths.join(destination, name))
    paths.tf_io().gfile.makedirs(destination)


def _within(path: str, directory: str) -> bool:
    if (paths.url_scheme(path) is None) != (paths.url_scheme(directory) is None):
        return False
    if paths.url_scheme(directory) is not None:
        return path.startswith(directory.rstrip("/") + "/")
    return datasets.within(os.path.abspath(path), os.path.abspath(directory))


def reshard(source: str, destination: str, options: Options, runner: Runner | None = None,
            err=None) -> list[str]:
    """Rewrite the dataset SRC describes into ``options.shards`` balanced shards in ``destination``.

    Args:
        source: a dataset directory with a manifest that lists its files, or a loader config.
        destination: the output directory (any file system TensorFlow writes).
        options: the number of shards, compression, index and overwrite.
        runner: the Beam runner that writes the shards, one element per shard; None: this process writes them.
        err: where a line on the run (a runner's) and a warning go, None for none.

    Returns:
        The paths written: the shards, their indexes, and the manifest, last.

    Raises:
        ConfigError: a DEST that holds something (without ``overwrite``) or holds SRC's files.
        ManifestError: SRC's manifest is invalid, lists no files or not one of the config's, or does not list
            a data file in SRC (unless ``options.leave_out_unlisted``).
        DataError: a source file cannot be read, is damaged or disagrees with its manifest entry (nothing is
            left in DEST).
        BeamNotInstalled: a runner is given and Apache Beam is not installed.
        BeamFailed: the Beam run failed.
    """
    if runner is not None:  # a worker's working directory may not be this one
        source, destination = (p if paths.url_scheme(p) else os.path.abspath(p) for p in (source, destination))
    src = load_source(source)
    if paths.isdir(source):  # a config's dataset lists its own files
        _check_unlisted(src, source, options, err)
    prepare_destination(destination, src, options.overwrite)
    tasks = shard_tasks(src, destination, options)
    if runner is None:
        results = [write_shard(task) for task in tasks]
    else:
        if err is not None:
            print(f"batchloaders reshard: writing {count(len(tasks), 'shard')} on {runner.name}", file=err)
        try:
            results = map_elements(write_shard, tasks, runner, label="reshard")
        except BaseException:
            _remove_temps(tasks)
            raise
    # A file read by several shards reports its problem in each: said once.
    found = dict.fromkeys((path, text) for result in results for path, text in result.problems)
    problems = [located(shown(path), text) for path, text in found]
    if problems:
        _remove_temps(tasks)
        raise DataError(problems)
    return _finish(src, destination, options, tasks, results)


def _remove_temps(tasks: Sequence[ShardTask]) -> None:
    for task in tasks:
        paths.remove(task.temp)


def _finish(src: Source, destination: str, options: Options, tasks: Sequence[ShardTask],
            results: Sequence[ShardWritten]) -> list[str]:
    """Every shard complete: rename them, write their indexes, then the manifest, last."""
    gfile = paths.tf_io().gfile
    written, indexes, entries = [], [], []
    for k, (task, result) in enumerate(zip(tasks, results)):
        name = shard_name(k, options.shards)
        final = paths.join(destination, name)
        gfile.rename(task.temp, final, overwrite=True)
        written.append(final)
        entry = {"name": name, "num_records": result.records, "size_bytes": result.size_bytes,
                 "sha256": result.sha256}
        if result.index is not None:
            paths.put(final + INDEX_SUFFIX, result.index, INDEX_TEMP_PREFIX)
            indexes.append(final + INDEX_SUFFIX)
            entry["index"] = {"name": name + INDEX_SUFFIX, "size_bytes": len(result.index),
                              "sha256": hashlib.sha256(result.index).hexdigest()}
        entries.append(entry)
    data = {"compression": options.compression, "allow_var_len": src.manifest["allow_var_len"],
            "features": src.manifest["features"], "files": entries}
    data.update((key, value) for key, value in src.manifest.items() if key not in KEY_ORDER)
    manifest_path = paths.join(destination, MANIFEST_NAME)
    text = to_json(data) + "\n"
    manifest_from_document(parse_text(text, manifest_path, ManifestError, base_dir=destination, fmt="json",
                                      bounds=MANIFEST))
    paths.put(manifest_path, text, MANIFEST_TEMP)
    return written + indexes + [manifest_path]
