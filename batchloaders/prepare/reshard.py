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
its manifest entry says (count, size or SHA-256) is a located DataError, and nothing is left in DEST. A run
that fails removes the DEST it created; a DEST that was there stays.
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import hashlib
import json
import os
import re
import socket
import time
import uuid
from typing import Callable, Sequence

from batchloaders.errors import BatchLoaderError, ConfigError, DataError, ManifestError, PluginsNotChecked, Problem
from batchloaders.config import datasets
from batchloaders.config.config import load_config
from batchloaders.config.document import MANIFEST, load_file, parse_text
from batchloaders.config.manifest import INDEX_SUFFIX, MANIFEST_NAME, manifest_from_document
from batchloaders.config.schema import schema_check
from batchloaders.core.model import Dataset
from batchloaders.prepare import files, paths
from batchloaders.prepare.beam import Runner, map_elements
from batchloaders.prepare.files import TEMP_PREFIX as MANIFEST_TEMP, located, to_json
from batchloaders.read.framing import FRAME_BYTES, count
from batchloaders.read.records import CHUNK, TF_COMPRESSION, ReadError, read_problem, read_records, shown

SHARD_NAME = "part-{index:05d}-of-{total:05d}.tfrecords"
PART_NAME = re.compile(r"part-\d{5}-of-\d{5}\.tfrecords(" + re.escape(INDEX_SUFFIX) + ")?")  # a shard or its index
TEMP_PREFIX = ".__reshard__."
LOCK_NAME = TEMP_PREFIX + "lock"
INDEX_TEMP_PREFIX = ".__index__."  # config.manifest.INDEX_TEMP matches the temporary index names
OUTPUT_COMPRESSIONS = (None, "gzip")
KEY_ORDER = ("compression", "allow_var_len", "features", "files")  # as `batchloaders manifest` writes them


class DestinationError(BatchLoaderError):
    """DEST could not be written: the located error names DEST and what failed (nothing there looks complete)."""


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
    """What SRC describes: its manifest's data (features and other keys), compression and files in order;
    ``directory``: the directory whose data files SRC is (a dataset directory, a config's ``dir`` dataset),
    None for a config's list of files."""

    manifest_path: str
    manifest: dict
    compression: str | None
    files: tuple[SourceFile, ...]
    directory: str | None = None


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
    (``(path, text)`` pairs), or why its temporary file could not be written (``failed``)."""

    records: int = 0
    size_bytes: int = 0
    sha256: str = ""
    index: bytes | None = None
    problems: tuple[tuple[str, str], ...] = ()
    failed: str = ""

    @classmethod
    def from_plain(cls, data: dict) -> "ShardWritten":
        """One from the plain data a Beam element sends back (see write_shard_plain)."""
        return cls(data["records"], data["size_bytes"], data["sha256"], data["index"],
                   tuple((str(path), str(text)) for path, text in data["problems"]), data["failed"])


def write_shard_plain(task: ShardTask) -> dict:
    """write_shard's result as plain data, as a Beam element returns it (results travel back as JSON)."""
    return dataclasses.asdict(write_shard(task))


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
        return Source(manifest_path, data, data["compression"], files, source)
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
    return Source(manifest.path, data, manifest.compression, tuple(files),
                  os.path.dirname(manifest.path) if dataset.type == "dir" else None)


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
        manifest entry, only the problems (the temporary file then removed): after the first, the shard's
        other pieces are still read, so that every damaged file is reported in one run. When the temporary
        file cannot be written, ``failed`` says why.
    """
    import tensorflow as tf  # deferred: the writer's errors

    offsets: list[int] = []
    problems: list[tuple[str, str]] = []
    try:
        options = tf.io.TFRecordOptions(compression_type=TF_COMPRESSION[task.write_compression])
        with tf.io.TFRecordWriter(task.temp, options) as writer:
            at = [0]

            def write(serialized: bytes) -> None:
                if not problems:  # the shard is not kept once a problem is found: reading goes on, writing not
                    writer.write(serialized)
                    offsets.append(at[0])
                    at[0] += len(serialized) + FRAME_BYTES

            for piece in task.pieces:
                absent = _absent(piece.source.path)
                found = [absent] if absent else copy_piece(piece, task.read_compression, write)
                problems += [(piece.source.path, text) for text in found]
        if problems:
            paths.remove(task.temp)
            return ShardWritten(problems=tuple(problems))
        size_bytes, sha256 = _hashed(task.temp)
    except (OSError, tf.errors.OpError) as error:
        return ShardWritten(failed=_said(error))
    index = None
    if task.indexed:
        from batchloaders.read.record_index import RecordIndex, encode  # deferred: NumPy, for indexed output only
        import numpy as np

        index = encode(RecordIndex(np.asarray(offsets, np.int64), size_bytes))
    return ShardWritten(len(offsets), size_bytes, sha256, index)


def _absent(path: str) -> str | None:
    """What is wrong when a manifest's data file is not there to read (a reader would call it damaged)."""
    gfile = paths.tf_io().gfile
    if paths.url_scheme(path) is None:
        missing, directory = not os.path.exists(path), os.path.isdir(path)
    else:
        missing = not gfile.exists(path)
        directory = not missing and gfile.isdir(path)
    if missing:
        return "not found: its manifest entry lists this file, which is not there (moved or removed since)"
    if directory:
        return "found a directory: its manifest entry lists a data file here"
    return None


def _said(error: BaseException) -> str:
    """An OSError's or TensorFlow error's own words."""
    return str(getattr(error, "message", None) or getattr(error, "strerror", None) or error)


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
    import tensorflow as tf  # deferred: the reader's errors

    if source.size_bytes is None and source.sha256 is None:
        return []
    try:
        size, sha256 = _hashed(source.path)
    except (OSError, tf.errors.OpError) as error:
        return [f"cannot be read ({_said(error)})"]
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


def prepare_destination(destination: str, source: Source, overwrite: bool) -> list[str]:
    """Check DEST and make it a directory; return the names in it that the finish replaces.

    Nothing in DEST is removed here: its previous entries go only once every new shard is complete. Refused:
    a DEST that holds SRC's manifest or files or lies inside SRC's directory (checked first, through symbolic
    links), a DEST that is a file, and a DEST that holds anything without ``overwrite``, but for our temporary
    files and the part files of a run killed while it finished (no manifest beside them), which the same
    reshard run again replaces.
    """
    inside = [p for p in (source.manifest_path, *(f.path for f in source.files)) if _within(p, destination)]
    if inside:
        raise ConfigError(Problem(destination, "$", f"found {shown(inside[0])} of SRC in DEST: expected DEST apart "
                                                    "from SRC (the output would replace its own input)"))
    home = source.directory
    if home is not None and _within(destination, home):  # a dir dataset finds files in subdirectories too
        raise ConfigError(Problem(destination, "$", f"found DEST inside SRC's directory {shown(home)}: expected DEST "
                                                    "outside it (the shards would become data files of SRC, and "
                                                    "`batchloaders manifest` on SRC would list every record twice)"))
    if paths.url_scheme(destination) is None and os.path.lexists(destination) and not os.path.isdir(destination):
        raise ConfigError(Problem(destination, "$", "found a file (or a link to none): expected DEST, a directory "
                                                    "to write the shards in, new or empty"))
    others = [name for name in paths.listing(destination) if not name.startswith(TEMP_PREFIX)]
    resumed = MANIFEST_NAME not in others and all(PART_NAME.fullmatch(name) for name in others)
    if others and not overwrite and not resumed:
        raise ConfigError(Problem(destination, "$", f"found {len(others):,} file(s) or directories in DEST ("
                                                    f"{datasets.quote_entries(others)}): expected an empty or new "
                                                    "directory (--overwrite replaces what it holds once every new "
                                                    "shard is written)"))
    _io(destination, "create the directory", paths.tf_io().gfile.makedirs, destination)
    return others


def _io(destination: str, what: str, function: Callable, *args) -> object:
    """``function(*args)``, its OSError or TensorFlow error said as a DestinationError on DEST."""
    import tensorflow as tf  # deferred: its errors

    try:
        return function(*args)
    except (OSError, tf.errors.OpError) as error:
        raise DestinationError(Problem(destination, "$", f"could not {what}: {_said(error)}")) from None


def _locked(destination: str) -> Callable[[], None]:
    """Hold DEST for this run: a lock file only one reshard holds at a time; returns what releases it.

    Locally the file is locked (``flock``) while held, so that a killed run's lock ends with its process;
    where files cannot be locked (another file system, Windows) a lock file younger than
    ``files.UNLOCKED_AGE`` is taken to be held. Our temporary files a run left are removed once the lock is
    ours: no other reshard writes in DEST then.
    """
    lock = paths.join(destination, LOCK_NAME)
    stamp = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                        "since": time.strftime("%Y-%m-%d %H:%M:%S %Z")})
    if paths.url_scheme(destination) is None and files.fcntl is not None:
        release = _io(destination, "write its lock file", _flocked, lock, stamp)
    else:
        if paths.exists(lock) and _age(lock) < files.UNLOCKED_AGE:
            raise _held(destination, lock)
        _io(destination, "write its lock file", paths.put, lock, stamp, TEMP_PREFIX)
        release = functools.partial(paths.remove, lock)
    try:
        for name in paths.listing(destination):
            if name.startswith(TEMP_PREFIX) and name != LOCK_NAME:
                _io(destination, "remove a killed run's temporary file", paths.remove, paths.join(destination, name))
    except BaseException:
        release()
        raise
    return release


def _flocked(lock: str, stamp: str) -> Callable[[], None]:
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            files.fcntl.flock(fd, files.fcntl.LOCK_EX | files.fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _held(os.path.dirname(lock), lock) from None
        except OSError:  # a file system without locks (some network mounts): the file is written, not locked
            break
        if os.fstat(fd).st_nlink:  # not the file of a run that removed it between our open and our lock
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, stamp.encode("utf-8"))

    def release() -> None:
        try:
            os.unlink(lock)
        finally:
            os.close(fd)
    return release


def _age(path: str) -> float:
    return time.time() - paths.tf_io().gfile.stat(path).mtime_nsec / 1e9


def _held(destination: str, lock: str) -> ConfigError:
    """The error of a DEST another reshard is writing, saying which (its pid, host and start, as it wrote them)."""
    try:
        held = json.loads(paths.read_bytes(lock) or b"{}")
        who = f"pid {held['pid']} on {held['host']}, since {held['since']}"
    except Exception:  # noqa: BLE001 (its content is only shown: a lock being written may still be empty)
        who = "its writer unknown"
    return ConfigError(Problem(destination, "$", f"found another reshard writing DEST (lock file {shown(lock)}, "
                                                 f"{who}): expected one reshard at a time in a DEST (wait for it to "
                                                 "end; remove the lock file only if no reshard runs)"))


def _within(path: str, directory: str) -> bool:
    if (paths.url_scheme(path) is None) != (paths.url_scheme(directory) is None):
        return False
    if paths.url_scheme(directory) is not None:
        return path.startswith(directory.rstrip("/") + "/")
    return datasets.within(os.path.abspath(path), os.path.abspath(directory))


def reshard(source: str, destination: str, options: Options, runner: Runner | None = None,
            err=None) -> list[str]:
    """Rewrite the dataset SRC describes into ``options.shards`` balanced shards in ``destination``.

    A run that fails, for any reason, removes the DEST it created (a DEST that was there stays, without our
    temporary files).

    Args:
        source: a dataset directory with a manifest that lists its files, or a loader config.
        destination: the output directory (any file system TensorFlow writes).
        options: the number of shards, compression, index and overwrite.
        runner: the Beam runner that writes the shards, one element per shard; None: this process writes them.
        err: where a line on the run (a runner's) and a warning go, None for none.

    Returns:
        The paths written: the shards, their indexes, and the manifest, last.

    Raises:
        ConfigError: SRC is not there; DEST holds SRC's files, is a file, holds something (without
            ``overwrite``), or another reshard is writing it.
        ManifestError: SRC's manifest is invalid, lists no files or not one of the config's, or does not list
            a data file in SRC (unless ``options.leave_out_unlisted``).
        DataError: a source file is missing, cannot be read, is damaged or disagrees with its manifest entry
            (DEST keeps what it held, and no temporary file).
        DestinationError: DEST cannot be written (what it held is kept while the shards are written).
        BeamNotInstalled: a runner is given and Apache Beam is not installed.
        BeamFailed: the Beam run failed.
    """
    if paths.url_scheme(source) is None and not os.path.exists(source):
        raise ConfigError(Problem(source, "$", "not found: expected SRC, a dataset directory holding "
                                               f"{MANIFEST_NAME} or a loader config (.yaml, .yml, .json)"))
    if runner is not None:  # a worker's working directory may not be this one
        source, destination = (p if paths.url_scheme(p) else os.path.abspath(p) for p in (source, destination))
    src = load_source(source)
    if paths.isdir(source):  # a config's dataset lists its own files
        _check_unlisted(src, source, options, err)
    created = not paths.exists(destination)
    old = prepare_destination(destination, src, options.overwrite)
    try:
        return _locked_run(src, destination, options, runner, err, old)
    except BaseException:
        if created:  # a failed run leaves no new DEST behind (one that was there stays)
            _remove_if_empty(destination)
        raise


def _locked_run(src: Source, destination: str, options: Options, runner: Runner | None, err,
                old: Sequence[str]) -> list[str]:
    """The shards written and finished in DEST, holding its lock; none of our temporary files left after."""
    release = _locked(destination)
    try:
        tasks = shard_tasks(src, destination, options)
        try:
            results = _written(tasks, runner, err)
            failed = next((task for task, result in zip(tasks, results) if result.failed), None)
            if failed is not None:
                raise DestinationError(Problem(destination, paths.relative(failed.temp, destination),
                                               f"could not write the shard: {results[tasks.index(failed)].failed}"))
            # A file read by several shards reports its problem in each: said once.
            found = dict.fromkeys((path, text) for result in results for path, text in result.problems)
            if found:
                raise DataError([located(shown(path), text) for path, text in found])
            return _io(destination, "finish the dataset", _finish, src, destination, options,
                       list(zip(tasks, results)), old)
        finally:
            _remove_temps(tasks)  # none left once renamed; all of them when anything failed
    finally:
        release()


def _written(tasks: Sequence[ShardTask], runner: Runner | None, err) -> list[ShardWritten]:
    """Every shard written, here or one Beam element each."""
    if runner is None:
        return [write_shard(task) for task in tasks]
    if err is not None:
        print(f"batchloaders reshard: writing {count(len(tasks), 'shard')} on {runner.name}", file=err)
    return [ShardWritten.from_plain(result) for result in map_elements(write_shard_plain, tasks, runner,
                                                                       label="reshard")]


def _remove_temps(tasks: Sequence[ShardTask]) -> None:
    for task in tasks:
        paths.remove(task.temp)


def _remove_if_empty(destination: str) -> None:
    """Remove the directory DEST if nothing is in it (its lock and temporary files are gone by now); a DEST
    another run has begun to write in meanwhile is kept. Best effort: the run's own error is what is said."""
    try:
        if paths.url_scheme(destination) is None:
            os.rmdir(destination)  # refuses a directory that is not empty
        elif not paths.listing(destination):
            paths.remove_tree(destination)
    except Exception:  # noqa: BLE001 (a DEST that cannot be removed stays, as it is when the run is killed)
        pass


def _finish(src: Source, destination: str, options: Options, done: Sequence[tuple[ShardTask, ShardWritten]],
            old: Sequence[str]) -> list[str]:
    """Every shard complete: DEST's previous entries removed (its manifest first, so that what is left of a run
    killed now does not look complete), the shards renamed, their indexes written, then the manifest, last."""
    for name in sorted(old, key=lambda name: name != MANIFEST_NAME):
        paths.remove_entry(paths.join(destination, name))
    gfile = paths.tf_io().gfile
    written, indexes, entries = [], [], []
    for k, (task, result) in enumerate(done):
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
