"""The index manifest: ``__index_manifest__.json`` in an ``index_dir``, which records the record indexes
written there apart from their data files (``batchloaders index DIR --index-dir PATH``).

With an ``index_dir``, the index of the data file whose name in the dataset manifest is ``N`` (its path
relative to the manifest's directory, '/' between directories) is ``index_dir/N.index`` (its format:
:mod:`batchloaders.read.record_index`), and the index manifest records, per data file::

    {"format": "batchloaders-index-manifest", "version": 1,
     "files": [{"name": "chars-0.tfrecords", "size_bytes": 396000, "sha256": "0b6f...", "num_records": 6000,
                "index": {"name": "chars-0.tfrecords.index", "size_bytes": 48024, "sha256": "2428..."}}]}

``size_bytes`` and ``sha256`` are the data file's when it was indexed, so that a data file that changed since
is told without reading it whole (its size now against ``size_bytes``, the dataset manifest's SHA-256 against
``sha256``); ``index`` is the index file's, so that an index that changed is told too. Entries are sorted by
name. The config check and the readers (read/record_index.py) read it here; ``batchloaders index`` writes it
(prepare/index.py) with :func:`index_manifest_text`.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Mapping

from batchloaders.errors import ManifestError, Problem
from batchloaders.core.limits import MAX_MANIFEST_BYTES
from batchloaders.config.manifest import INDEX_SUFFIX
from batchloaders.core.model import IndexFile, file_key, url_scheme

INDEX_MANIFEST_NAME = "__index_manifest__.json"
FORMAT = "batchloaders-index-manifest"
VERSION = 1
_SHA256 = re.compile(r"[0-9a-f]{64}")
_WRITES = "`batchloaders index DIR --index-dir PATH` writes it with the indexes"


@dataclasses.dataclass(frozen=True)
class IndexedFile:
    """What the index manifest records of one data file and its index.

    Attributes:
        name: the data file's name in the dataset manifest (relative to the manifest's directory).
        num_records: its records.
        size_bytes: its size when it was indexed.
        sha256: its SHA-256 when it was indexed.
        index: the index file (its name relative to the index_dir), its size and SHA-256.
        at: the entry's place in ``files``, for messages.
    """

    name: str
    num_records: int
    size_bytes: int
    sha256: str
    index: IndexFile
    at: int = 0

    def json_path(self) -> str:
        return f"$.files[{self.at}]"

    def as_json(self) -> dict:
        """The entry as the index manifest writes it."""
        return {"name": self.name, "size_bytes": self.size_bytes, "sha256": self.sha256,
                "num_records": self.num_records, "index": {"name": self.index.name,
                                                           "size_bytes": self.index.size_bytes,
                                                           "sha256": self.index.sha256}}


@dataclasses.dataclass(frozen=True)
class IndexManifest:
    """An index manifest read and checked: its path, and its entries by data file name."""

    path: str
    files: Mapping[str, IndexedFile]


def join(index_dir: str, name: str) -> str:
    """``name`` ('/' between directories) under ``index_dir``, a local directory or a URL."""
    if url_scheme(index_dir) is not None:
        return index_dir.rstrip("/") + "/" + name
    return os.path.join(index_dir, *name.split("/"))


def index_manifest_path(index_dir: str) -> str:
    """Where the index manifest of ``index_dir`` is."""
    return join(index_dir, INDEX_MANIFEST_NAME)


def data_name(data_path: str, manifest_path: str) -> str | None:
    """The name of ``data_path`` relative to the directory of the dataset manifest ``manifest_path`` ('/'
    between directories), or None when it lies outside it."""
    if (url_scheme(data_path) is None) != (url_scheme(manifest_path) is None):
        return None
    if url_scheme(manifest_path) is not None:
        base, key = file_key(manifest_path).rsplit("/", 1)[0] + "/", file_key(data_path)
        return key[len(base):] if key.startswith(base) else None
    relative = os.path.relpath(os.path.abspath(data_path), os.path.dirname(os.path.abspath(manifest_path)))
    return None if relative.split(os.sep)[0] == os.pardir else relative.replace(os.sep, "/")


def index_manifest_text(entries: list[IndexedFile]) -> str:
    """The text of an index manifest recording ``entries`` (sorted by name)."""
    files = [e.as_json() for e in sorted(entries, key=lambda e: e.name)]
    return json.dumps({"format": FORMAT, "version": VERSION, "files": files}, indent=2) + "\n"


_CACHE: dict[str, tuple[tuple, IndexManifest]] = {}


def load_index_manifest(index_dir: str) -> IndexManifest:
    """The index manifest of ``index_dir``, read and checked (read again only when its size or time changed).

    Args:
        index_dir: the directory the indexes were written to, local or a URL TensorFlow's file systems open.

    Returns:
        Its entries by data file name.

    Raises:
        ManifestError: the index manifest is missing, cannot be read, or is not one this version reads, each
            problem located at its JSON path.
    """
    path = index_manifest_path(index_dir)
    stamp = _stamp(path)
    if stamp is None:
        raise ManifestError(Problem(path, "$", f"file not found: expected the index manifest of {index_dir}: "
                                               f"{_WRITES}"))
    cached = _CACHE.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    found = _parse(path, _read(path, stamp[0]))
    _CACHE[path] = (stamp, found)
    return found


def _stamp(path: str) -> tuple | None:
    """(size, modification time in ns) of a file, or None when it is not there."""
    if url_scheme(path) is None:
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return None
        return stat.st_size, stat.st_mtime_ns
    import tensorflow as tf  # deferred: only a URL index_dir needs TensorFlow's file systems here

    try:
        if not tf.io.gfile.exists(path):
            return None
        stat = tf.io.gfile.stat(path)
    except tf.errors.OpError as error:  # no such file system, a host that cannot be reached, no permission
        raise ManifestError(Problem(path, "$", f"cannot be read ({error.message.splitlines()[0]})")) from None
    return stat.length, stat.mtime_nsec


def _read(path: str, size: int) -> bytes:
    if size > MAX_MANIFEST_BYTES:
        raise ManifestError(Problem(path, "$", f"found a file of {size:,} bytes: expected an index manifest of at "
                                               f"most {MAX_MANIFEST_BYTES // 2**20} MiB"))
    try:
        if url_scheme(path) is None:
            with open(path, "rb") as f:
                return f.read()
        import tensorflow as tf  # deferred: see _stamp

        with tf.io.gfile.GFile(path, "rb") as f:
            return f.read()
    except OSError as error:
        raise ManifestError(Problem(path, "$", f"cannot be read ({error.strerror or error})")) from None
    except Exception as error:  # tf.errors.OpError, which this layer does not import
        raise ManifestError(Problem(path, "$", f"cannot be read ({getattr(error, 'message', error)})")) from None


def _parse(path: str, blob: bytes) -> IndexManifest:
    try:
        data = json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ManifestError(Problem(path, "$", f"it is not JSON text ({error}): expected the index manifest "
                                               f"{_WRITES}")) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ManifestError(Problem(path, "$.format", f"expected {FORMAT!r}: it is not an index manifest "
                                                      f"({_WRITES})"))
    if data.get("version") != VERSION:
        raise ManifestError(Problem(path, "$.version", f"found {data.get('version')!r}: this version reads version "
                                                       f"{VERSION}: write the indexes again ({_WRITES})"))
    if not isinstance(data.get("files"), list):
        raise ManifestError(Problem(path, "$.files", "expected a list of entries"))
    problems: list[Problem] = []
    files: dict[str, IndexedFile] = {}
    for at, raw in enumerate(data["files"]):
        entry = _entry(raw, at, lambda where, message: problems.append(Problem(path, where, message)))
        if entry is not None and entry.name in files:
            problems.append(Problem(path, f"$.files[{at}].name", f"found {entry.name!r} a second time"))
        elif entry is not None:
            files[entry.name] = entry
    if problems:
        raise ManifestError(problems)
    return IndexManifest(path, files)


def _entry(raw, at: int, problem) -> IndexedFile | None:
    """One ``files`` entry checked (``problem(json path, message)`` for each thing wrong), or None."""
    where = f"$.files[{at}]"
    if not isinstance(raw, dict) or not isinstance(raw.get("index"), dict):
        problem(where, "expected an object with name, size_bytes, sha256, num_records and index {name, "
                       "size_bytes, sha256}")
        return None
    wrong = [f"{where}.{key}" for key in ("num_records", "size_bytes") if not _count(raw.get(key))]
    wrong += [f"{where}.index.size_bytes"] if not _count(raw["index"].get("size_bytes")) else []
    wrong += [f"{where}{key}" for key, value in ((".sha256", raw.get("sha256")),
                                                 (".index.sha256", raw["index"].get("sha256")))
              if not (isinstance(value, str) and _SHA256.fullmatch(value))]
    for bad in wrong:
        problem(bad, "expected " + ("64 lowercase hex digits" if bad.endswith("sha256") else "an integer >= 0"))
    name = raw.get("name")
    if not isinstance(name, str) or not name or name.startswith("/") or ".." in name.split("/"):
        problem(f"{where}.name", f"found {name!r}: expected a data file's name relative to its manifest's directory")
        return None
    if raw["index"].get("name") != name + INDEX_SUFFIX:
        problem(f"{where}.index.name", f"found {raw['index'].get('name')!r}: expected {name + INDEX_SUFFIX!r}")
        return None
    if wrong:
        return None
    index = IndexFile(raw["index"]["name"], raw["index"]["size_bytes"], raw["index"]["sha256"])
    return IndexedFile(name, raw["num_records"], raw["size_bytes"], raw["sha256"], index, at)


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
