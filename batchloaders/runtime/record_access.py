"""One record of a dataset, decoded as the loader decodes it: ``batchloaders.read_record`` and
``batchloaders preview CONFIG --record FILE:N``.

With a record index (``batchloaders index``) the record is read at its byte offset (through the dataset's
byte source: a local file, or any file system TensorFlow reads, such as ``gs://``); without one the
file is read from its start up to the record. The record is parsed as the config parses it (the
primary features, renamed, cast and reshaped as the manifest says); for a loader whose example is one
record (independent), the secondary features and processing steps run on it too. A sequence loader's
examples are windows of several records, so its record is shown as parsed.
"""
from __future__ import annotations

import dataclasses
import os
import warnings

import numpy as np
import tensorflow as tf

from batchloaders.errors import ConfigError, DataError, Problem
from batchloaders.config.config import load_config
from batchloaders.config.kinds import kind
from batchloaders.core.model import LoaderConfig, file_key, url_scheme
from batchloaders.read import naming, origins, positional
from batchloaders.read.framing import FRAME_BYTES, HEADER_BYTES, count, is_record_header, masked_crc32c
from batchloaders.read.parsing import parse_batch
from batchloaders.read.record_index import load_index
from batchloaders.read.records import ReadError, read_problem, read_records, tf_message
from batchloaders.transform.batching import Batch
from batchloaders.loaders import base, independent
from batchloaders.runtime.translate import data_error_from

_told: set[str] = set()  # files read without an index that read_record has warned of


@dataclasses.dataclass(frozen=True)
class Fetched:
    """Record ``number`` of data file ``path``, decoded; ``by_index``: read at its offset through the index;
    ``hint``: what would make such a read instant."""

    path: str
    number: int
    values: dict[str, np.ndarray]
    by_index: bool
    hint: str = ""  # what would make reading it instant, when it was not read through an index


def read_record(config, file: str | None = None, n: int | None = None, *, index: int | None = None
                ) -> dict[str, np.ndarray]:
    """Record ``n`` of data file ``file`` of ``config``'s dataset, or record ``index`` of the whole dataset,
    decoded as the loader decodes it. Without a record index (``batchloaders index``) the file is read from
    its start up to the record, and a warning says so once per file.

    Args:
        config: the config: a path, a dict or a loaded config.
        file: the data file, relative to the dataset directory (the manifest's directory), or absolute.
        n: the record's number in ``file``, from 0.
        index: the record's number in the whole dataset (its files in the config's order, counted with the
            manifest's record counts), instead of ``file`` and ``n``.

    Returns:
        Tensor name -> NumPy array (a feature list cut to its length).

    Raises:
        ConfigError: for a config given as a path or dict that is invalid (as load_config raises it), a file
            that is not one of the dataset's, arguments that name no record (both ``index`` and ``file``/``n``,
            or neither), or ``index`` when the manifest lists no record count of some file.
        ManifestError: for a config given as a path or dict whose dataset's manifest is invalid.
        DataError: for a record number out of range, or a record that cannot be read or parsed.
    """
    fetched = fetch(config, file, n, index=index)
    if not fetched.by_index and fetched.path not in _told:
        _told.add(fetched.path)
        warnings.warn(f"{fetched.path} has no record index: read from its start up to record {fetched.number}; "
                      f"{fetched.hint}", stacklevel=2)
    return fetched.values


def without_index_hint(config: LoaderConfig) -> str:
    """What makes reading one record instant for this config's data: an index, or for compressed files (which
    cannot be indexed) rewriting them uncompressed.

    Args:
        config: the loaded config.

    Returns:
        A sentence's end.
    """
    if config.dataset.manifest.compression is not None:
        return ("compressed files cannot be read from the middle: `batchloaders reshard SRC DEST --shards N` "
                "rewrites them uncompressed and indexed, which makes reading a record instant")
    return "`batchloaders index` makes reading a record instant"


def fetch(config, file: str | None, n: int | None, *, index: int | None = None) -> Fetched:
    """:func:`read_record` with where the record was read and how."""
    config = config if isinstance(config, LoaderConfig) else load_config(config)
    if index is not None:
        if file is not None or n is not None:
            raise ConfigError(Problem(config.source, "$", "give either a file and a record number, or index, not both"))
        path, n = global_record(config, index)
    else:
        if file is None or n is None:
            raise ConfigError(Problem(config.source, "$", "give a file and a record number, or index"))
        path = data_file(config, file)
    serialized, by_index = serialized_record(config, path, n)
    return Fetched(path, n, decode(config, path, n, serialized), by_index, without_index_hint(config))


def data_file(config: LoaderConfig, file: str) -> str:
    """The data file ``file`` names: one of the dataset's files; ConfigError otherwise."""
    dataset = config.dataset
    base_dir = os.path.dirname(dataset.manifest.path)  # a dir dataset's manifest sits at the top of data_dir
    if url_scheme(file) is not None or url_scheme(base_dir) is not None:
        path = file if url_scheme(file) is not None else base_dir.rstrip("/") + "/" + file
    else:
        path = os.path.join(base_dir, os.path.expanduser(file))
    files = [file_key(f) for f in dataset.files]
    if file_key(path) in files:
        return dataset.files[files.index(file_key(path))]
    shown = ", ".join(_relative(f, base_dir) for f in dataset.files[:5])
    more = f" and {len(files) - 5:,} more" if len(files) > 5 else ""
    raise ConfigError(Problem(config.source, "$.args.dataset", (
        f"found {file!r} ({file_key(path)}), which is not one of the dataset's {count(len(files), 'data file')}: "
        f"expected a path relative to {base_dir}, or absolute, such as {shown}{more}")))


def _relative(path: str, base_dir: str) -> str:
    """``path`` relative to ``base_dir`` (a URL's by its name), as a message shows it."""
    if url_scheme(base_dir) is not None:
        prefix = base_dir.rstrip("/") + "/"
        return path[len(prefix):] if path.startswith(prefix) else path
    return path if url_scheme(path) is not None else os.path.relpath(path, base_dir)


def global_record(config: LoaderConfig, index: int) -> tuple[str, int]:
    """The file and record number of record ``index`` of the dataset, its files in the config's order."""
    manifest, first = config.dataset.manifest, 0
    counts = []
    for path in config.dataset.files:
        entry = manifest.entry(path)
        if entry is None:
            raise ConfigError(Problem(manifest.path, "$.files", (
                f"the manifest lists no record count for {path}: a record's global index needs every file's "
                "count (write them with `batchloaders manifest`)")))
        counts.append(entry.num_records)
    total = sum(counts)
    if not 0 <= index < total:
        raise DataError(Problem(config.source, "$.args.dataset", (
            f"found record index {index}: the dataset holds {count(total, 'record')} in "
            f"{count(len(counts), 'file')}: expected 0 to {total - 1}")))
    for path, records in zip(config.dataset.files, counts):
        if index < first + records:
            return path, index - first
        first += records
    raise AssertionError("unreachable: index < total")


def _out_of_range(path: str, n: int, records: int) -> DataError:
    return DataError(Problem(path, f"record {n}", (
        f"found record number {n}: the file holds {count(records, 'record')}: expected 0 to {records - 1}"
        if records else f"found record number {n}: the file holds no record")))


def serialized_record(config: LoaderConfig, path: str, n: int) -> tuple[bytes, bool]:
    """The bytes of record ``n`` of ``path`` and whether they were read at their offset through the index."""
    manifest = config.dataset.manifest
    entry = manifest.entry(path)
    if n < 0 or (entry is not None and n >= entry.num_records):
        raise _out_of_range(path, n, entry.num_records if entry is not None else 0)
    index_dir = config.dataset.access.index_dir
    if entry is not None and (entry.index is not None or index_dir is not None) and manifest.compression is None:
        found = load_index(path, manifest, index_dir)
        return read_frame(config, path, n, int(found.offsets[n]), int(found.lengths[n])), True
    last = None
    try:
        for last, _, serialized in read_records(path, manifest.compression, limit=n + 1):
            if last == n:
                return serialized, False
    except ReadError as error:
        raise DataError(Problem(path, f"record {error.index}", read_problem(error, manifest.compression))) from None
    raise _out_of_range(path, n, 0 if last is None else last + 1)


def read_frame(config: LoaderConfig, path: str, n: int, offset: int, length: int) -> bytes:
    """The payload of the record whose frame begins at ``offset``, read through the dataset's byte source
    (read/positional.py), its framing and checksums checked."""
    source = positional.open_source(config.dataset.access, [path], config.source)
    try:
        (frame,) = source.read(0, [offset], [length + FRAME_BYTES])
    except OSError as error:
        raise DataError(Problem(path, f"record {n}", f"the file cannot be read ({error.strerror or error})")) from None
    except tf.errors.OpError as error:
        said = "it is not there" if isinstance(error, tf.errors.NotFoundError) else tf_message(error)
        raise DataError(Problem(path, f"record {n}", f"the file cannot be read ({said})")) from None
    finally:
        source.close()
    head, payload, crc = frame[:HEADER_BYTES], frame[HEADER_BYTES:-4], frame[-4:]
    if (len(frame) != length + FRAME_BYTES or not is_record_header(head)
            or int.from_bytes(head[:8], "little") != length):
        raise DataError(Problem(path, f"record {n}", (
            f"at byte {offset:,}, where its index says it begins, there is no record frame of {count(length, 'byte')}: "
            "the file or its index was changed (run `batchloaders verify`)")))
    if int.from_bytes(crc, "little") != masked_crc32c(payload):
        raise DataError(Problem(path, f"record {n}", f"at byte {offset:,}: its payload's checksum is wrong: the "
                                                     "record is damaged"))
    return payload


def decode(config: LoaderConfig, path: str, n: int, serialized: bytes) -> dict[str, np.ndarray]:
    """One record parsed as the config parses it; for a loader whose examples are records, with its
    secondary features and processing steps. Tensor name -> NumPy array, feature lists cut to their length."""
    names = tf.constant([naming.record_name(path, n)])
    try:
        values, lengths = parse_batch(tf.constant([serialized]), config.dataset.manifest, config.selected,
                                      names=names)
        if not kind(config.type).sequence:
            extras = {}
            if origins.wanted(config):
                file_index = list(config.dataset.files).index(path)
                extras = origins.extras(config, tf.constant([file_index]), tf.constant([n], tf.int64))
            batch = base.transform(Batch(values, lengths, extras, set(independent.zero_tails(config))), config)
            values, lengths = batch.values, batch.lengths
        return {name: _one(value, lengths.get(name)) for name, value in values.items()}
    except (tf.errors.OpError, UnicodeDecodeError) as error:  # (a parser message that is not UTF-8)
        located = data_error_from(error)
        if located is not None and path in str(located):  # TensorFlow's message named the record: its words
            raise located from None
        proto = "SequenceExample" if config.dataset.manifest.allow_var_len else "Example"
        raise DataError(Problem(path, f"record {n}", (
            f"found bytes TensorFlow cannot parse as the manifest's features: expected a serialized "
            f"tf.train.{proto} ({tf_message(error) if isinstance(error, tf.errors.OpError) else 'not a protobuf'})"
        ))) from None


def _one(value, length) -> np.ndarray:
    """The first (only) example of a [1, ...] tensor, cut to its length when it has one."""
    if isinstance(value, tf.RaggedTensor):
        return value[0].numpy()
    out = np.asarray(value[0])
    return out[:int(np.asarray(length)[0])] if length is not None else out
