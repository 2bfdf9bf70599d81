"""Data files as the data commands see them: what a file is, its records, its end, each record's features.

* :func:`sniff`: what a file holds, from its first bytes (an uncompressed
  TFRecord file, a GZIP or ZLIB stream of one, an empty file, something else).
* :func:`read_records`: records with their index and byte offset, through
  TensorFlow's reader; :class:`ReadError` where that reader fails.
* :class:`StreamCheck`: whether a GZIP or ZLIB stream is complete. TensorFlow's
  reader stops without an error at a stream that is cut or lacks its trailer.
* :func:`scan_file`: one file whole: its size, SHA-256 and records, and every
  way its end does not add up.
* :func:`check_record`: one serialized record against the manifest's features,
  parsed with protobuf in Python (no TensorFlow op runs).

Problems are returned as text without the file's path; the commands put the
path first.
"""
from __future__ import annotations

import array
import dataclasses
import hashlib
import math
import os
import re
import zlib
from typing import Iterator

import tensorflow as tf
from google.protobuf.message import DecodeError

from batchloaders.errors import suggest
from batchloaders.read.framing import (FRAME_BYTES, HEADER_BYTES, STREAM, Sniffed, count, is_record_header,  # noqa: F401
                                  masked_crc32c, sniff_bytes)
from batchloaders.config.datasets import url_scheme, within
from batchloaders.core.limits import ITEM_BYTES
from batchloaders.core.model import Manifest, ManifestFeature

TF_COMPRESSION = {None: "", "zlib": "ZLIB", "gzip": "GZIP"}
BLOCK = 256  # records TensorFlow hands over at a time
CHUNK = 1 << 20  # bytes read at a time to hash a file
SNIFF_BYTES = 1 << 16  # bytes sniff() looks at
MAX_RECORD_LINES = 20  # distinct record problems shown per file

# ---------------------------------------------------------------------------------------------- paths


def shown(path: str) -> str:
    """``path`` as the commands print it: relative to the working directory when it lies below it."""
    if url_scheme(path) is not None:
        return path
    rel = os.path.relpath(path)
    return path if rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel


def open_binary(path: str):
    """A binary file object for a local path or any URL TensorFlow's file systems read."""
    return tf.io.gfile.GFile(path, "rb") if url_scheme(path) is not None else open(path, "rb")


def compression_name(compression: str | None) -> str:
    """How a manifest writes a compression: null, 'gzip' or 'zlib'."""
    return "null" if compression is None else repr(compression)


def sniff(path: str, dataset_dir: str | None) -> Sniffed:
    """Tell an uncompressed TFRecord file, a GZIP or ZLIB stream of one, an empty file and anything else apart.

    Only a file within ``dataset_dir`` (symlinks resolved) is quoted when it is not TFRecord: the others may be
    anything a list names (a list file of /etc/shadow must not put its bytes into a log).
    """
    with open_binary(path) as f:
        head = f.read(SNIFF_BYTES)
    show = dataset_dir is not None and url_scheme(path) is None and within(path, dataset_dir)
    return sniff_bytes(head, show)


# ---------------------------------------------------------------------------------------------- reading


_TF_PREFIX = re.compile(r"^\{\{[^}]*\}\}\s*")


# TensorFlow's record reader words a cut record with a stray quote and its status twice ("truncated record at
# 464' failed with Read less bytes than requested"): said plainly.
_CUT_RECORD = re.compile(r"truncated record at (\d+)' failed with Read less bytes than requested")


def tf_message(error: BaseException) -> str:
    """The first line of a TensorFlow error without TensorFlow's op prefix and suffix, at most 200 characters."""
    text = _TF_PREFIX.sub("", (getattr(error, "message", None) or str(error)).strip())
    line = text.splitlines()[0] if text else type(error).__name__
    line = line.split(" [Op:")[0].strip() or type(error).__name__
    line = _CUT_RECORD.sub(r"the data ends inside the record that starts at byte \1", line)
    return line if len(line) <= 200 else line[:197] + "..."


class ReadError(Exception):
    """TensorFlow's reader failed at record ``index``, which begins at ``offset`` of the (uncompressed) stream."""

    def __init__(self, index: int, offset: int, message: str):
        super().__init__(f"record {index} at byte {offset}: {message}")
        self.index, self.offset, self.message = index, offset, message


def read_records(path: str, compression: str | None, limit: int | None = None
                 ) -> Iterator[tuple[int, int, bytes]]:
    """Yield (index, offset, serialized) of each record, the offset counted in the uncompressed stream.

    Raises :class:`ReadError` where TensorFlow's reader fails, after yielding every record before it.
    """
    records = tf.data.TFRecordDataset(path, compression_type=TF_COMPRESSION[compression], buffer_size=CHUNK)
    if limit is not None:
        records = records.take(limit)
    index = offset = 0
    try:
        for block in records.batch(BLOCK).prefetch(1):
            for serialized in block.numpy():
                yield index, offset, serialized
                index += 1
                offset += len(serialized) + FRAME_BYTES
    except tf.errors.OpError as error:
        first = error
    else:
        return
    # The failed block may hold good records before the damage: read them one at a time.
    try:
        for serialized in records.skip(index):
            serialized = serialized.numpy()
            yield index, offset, serialized
            index += 1
            offset += len(serialized) + FRAME_BYTES
    except tf.errors.OpError as error:
        first = error
    raise ReadError(index, offset, tf_message(first))


def read_problem(error: ReadError, compression: str | None) -> str:
    """A ReadError in words."""
    if compression is None:
        return (f"record {error.index} at byte {error.offset:,}: cannot be read ({error.message}): a record's "
                "length, payload or checksum is damaged, or the file ends inside a record")
    return (f"record {error.index} at byte {error.offset:,} of the uncompressed stream: cannot be read "
            f"({error.message}): the {STREAM[compression]} stream or a record in it is damaged")


class StreamCheck:
    """Fed a GZIP or ZLIB file's bytes in order, tells whether its stream is whole.

    GZIP files may hold several streams (members) one after the other, as
    TensorFlow's reader does; anything else after the end of the stream is a problem.
    """

    def __init__(self, compression: str):
        self.compression = compression
        self.name = STREAM[compression]
        self.wbits = 31 if compression == "gzip" else 15
        self.stream = zlib.decompressobj(self.wbits)
        self.fed = 0  # compressed bytes fed
        self.start = 0  # where the current member begins
        self.members = 1
        self.member_out = 0  # bytes the current member gave
        self.out = 0  # uncompressed bytes in all
        self.problem: str | None = None

    def feed(self, chunk: bytes) -> None:
        base, data = self.fed, chunk
        self.fed += len(chunk)
        while data and self.problem is None:
            if self.stream.eof:
                at = base + len(chunk) - len(data)
                if self.compression != "gzip":
                    self.problem = self._garbage(at)
                    return
                self.stream, self.start, self.member_out = zlib.decompressobj(self.wbits), at, 0
                self.members += 1
            try:
                out = self.stream.decompress(data, CHUNK)
            except zlib.error as error:
                self.problem = (self._garbage(self.start) if self.members > 1 and self.member_out == 0
                                else f"the {self.name} stream is damaged ({error})")
                return
            self.out += len(out)
            self.member_out += len(out)
            data = self.stream.unused_data if self.stream.eof else self.stream.unconsumed_tail

    def finish(self) -> str | None:
        """The problem of the stream fed, or None when it is whole."""
        if self.problem is None and not self.stream.eof:
            if self.members > 1 and self.member_out == 0:
                return self._garbage(self.start)
            return (f"the {self.name} stream ends before its end marker and trailer: the file was cut, or was "
                    "never finished (TensorFlow's reader stops there without an error)")
        if self.problem is None and self.members > 1:
            return (f"the file holds {self.members} GZIP streams one after the other: TensorFlow reads them all, "
                    "but the loader checks where a GZIP file ends against its trailer, which records the last "
                    "stream only, and reports the file damaged (compress it again as one stream)")
        return self.problem

    def _garbage(self, at: int) -> str:
        return (f"the {self.name} stream ends at byte {at:,}, but the file goes on for "
                f"{count(self.fed - at, 'more byte')} that are not another {self.name} stream (bytes appended?)")


@dataclasses.dataclass
class Scan:
    """One data file read whole."""

    path: str
    size: int = 0
    sha256: str = ""
    records: int = 0
    complete: bool = False  # every record was read and the file's end adds up
    problems: list[str] = dataclasses.field(default_factory=list)
    offsets: array.array | None = None  # where each record's frame begins, when asked for (a record index's check)


def scan_file(path: str, compression: str | None, *, manifest: Manifest | None = None, progress=None,
              dataset_dir: str | None = None, offsets: bool = False) -> Scan:
    """Read a data file whole: hash it, read its records with TensorFlow and check that its end adds up.

    ``manifest``: check every record against its features too. ``progress``: a Progress to count on.
    ``dataset_dir`` (by default the manifest's directory): see :func:`sniff`. ``offsets``: keep where each
    record begins in ``scan.offsets``.
    """
    scan = Scan(path, offsets=array.array("q") if offsets else None)
    if dataset_dir is None and manifest is not None:
        dataset_dir = os.path.dirname(manifest.path)
    found = sniff(path, dataset_dir)
    if found.kind == "other":
        scan.problems.append(f"not a TFRecord file: {found.detail}")
        return scan
    if found.kind != "empty" and found.compression != compression:
        scan.problems.append(f"the file is {found.describe()}, but the manifest says compression "
                             f"{compression_name(compression)}")
        return scan
    stream = StreamCheck(compression) if compression else None
    digest = hashlib.sha256()
    with open_binary(path) as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            scan.size += len(chunk)
            if stream is not None:
                stream.feed(chunk)
            if progress is not None:
                progress.advance(nbytes=len(chunk))
    scan.sha256 = digest.hexdigest()
    records = RecordProblems()
    consumed = 0
    try:
        for index, offset, serialized in read_records(path, compression):
            consumed = offset + len(serialized) + FRAME_BYTES
            scan.records = index + 1
            if scan.offsets is not None:
                scan.offsets.append(offset)
            if manifest is not None:
                records.add(index, check_record(serialized, manifest))
            if progress is not None and scan.records % BLOCK == 0:
                progress.advance(records=BLOCK)
    except ReadError as error:
        damage = [read_problem(error, compression)]
    else:
        damage = _end_problems(scan, stream, consumed)
    finally:
        if progress is not None:
            progress.advance(records=scan.records % BLOCK)
    scan.complete = not damage
    scan.problems = records.lines() + damage  # in the order of the records they concern
    return scan


def _end_problems(scan: Scan, stream: StreamCheck | None, consumed: int) -> list[str]:
    """What TensorFlow's reader passes over without an error: bytes after the last whole record, a cut stream."""
    records, ends = count(scan.records, "record"), "s" * (scan.records == 1)
    if scan.size == 0:
        return []  # an empty file holds no records, compressed or not
    if stream is None:
        if consumed == scan.size:
            return []
        return [f"the file is {scan.size:,} bytes, but its {records} end{ends} at byte {consumed:,}: the last "
                f"{count(scan.size - consumed, 'byte')} are not a whole record (the file was cut inside a record "
                "header, or has bytes appended)"]
    problem = stream.finish()
    if problem is not None:
        return [problem]
    if consumed != stream.out:
        return [f"the {stream.name} stream holds {stream.out:,} bytes, but its {records} end{ends} at byte "
                f"{consumed:,}: the last {count(stream.out - consumed, 'byte')} are not a whole record"]
    return []


class RecordProblems:
    """The problems of the records of one file, each message once with the records it was found in."""

    def __init__(self):
        self.found: dict[str, list[int]] = {}

    def add(self, index: int, problems: list[str]) -> None:
        for problem in problems:
            self.found.setdefault(problem, []).append(index)

    def lines(self, limit: int = MAX_RECORD_LINES) -> list[str]:
        out = []
        for problem, indices in list(self.found.items())[:limit]:
            line = f"record {indices[0]}: {problem}"
            if len(indices) == 2:
                line += f" (also in record {indices[1]})"
            elif len(indices) > 2:
                line += f" (also in {len(indices) - 1:,} more records: {ranges(indices[1:])})"
            out.append(line)
        if len(self.found) > limit:
            out.append(f"... and {len(self.found) - limit:,} more kinds of record problems")
        return out


def ranges(indices: list[int], most: int = 5) -> str:
    """Sorted indices as runs: [1, 2, 3, 5] -> '1-3, 5'; at most ``most`` runs, then '...'."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:most]]
    return ", ".join(text) + (", ..." if len(runs) > most else "")


# ----------------------------------------------------------------------------------------------- records


STORED = {"int": "int64_list", "float": "float_list", "string": "bytes_list", "raw": "bytes_list"}


def values_per_record(feature: ManifestFeature) -> int:
    """Values one record (one step of a feature list, one row of a variable-length feature) stores: byte
    strings for raw, else prod(shape)."""
    if feature.deserialize_type == "raw":
        return 1 if feature.var_len else feature.raw_len
    return math.prod(feature.shape)


def raw_bytes(feature: ManifestFeature) -> int:
    """Bytes of each byte string of a raw feature: one value of the manifest's shape."""
    return math.prod(feature.shape) * ITEM_BYTES[feature.dtype]


def expectation(feature: ManifestFeature) -> str:
    """What the manifest says one record (one step) stores, e.g. 'float (float_list) of shape [4] (4 values)'."""
    if feature.ragged:
        return _ragged_expectation(feature)
    shape = list(feature.shape)
    n = values_per_record(feature)
    if feature.deserialize_type == "raw":
        each = " each" if n > 1 else ""
        what = (f"raw {feature.dtype} of shape {shape} (a bytes_list of {count(n, 'byte string')} of "
                f"{count(raw_bytes(feature), 'byte')}{each})")
    else:
        what = f"{feature.deserialize_type} ({STORED[feature.deserialize_type]}) of shape {shape} ({count(n, 'value')})"
    return f"a feature list whose every step holds {what}" if feature.var_len else what


def _ragged_expectation(feature: ManifestFeature) -> str:
    """What a variable-length feature stores, e.g. 'int (int64_list) of shape [null, 3] (a multiple of 3 values)'."""
    shape = "[" + ", ".join(["null", *map(str, feature.shape)]) + "]"
    if feature.deserialize_type == "raw":
        return (f"raw {feature.dtype} of shape {shape} (a bytes_list of any number of byte strings of "
                f"{count(raw_bytes(feature), 'byte')} each)")
    n = values_per_record(feature)
    values = "any number of values" if n == 1 else f"a multiple of {n:,} values"
    return f"{feature.deserialize_type} ({STORED[feature.deserialize_type]}) of shape {shape} ({values})"


def describe_stored(value) -> str:
    """What a tf.train.Feature holds, e.g. 'an int64_list of 3 values', 'a bytes_list of 1 byte string of 3 bytes'."""
    kind = value.WhichOneof("kind")
    if kind is None:
        return "a feature with no value list"
    values = getattr(value, kind).value
    article = "an" if kind == "int64_list" else "a"
    if kind != "bytes_list" or not values:
        return f"{article} {kind} of {count(len(values), 'value')}"
    sizes = sorted({len(v) for v in values})
    size = count(sizes[0], "byte") if len(sizes) == 1 else f"{sizes[0]:,} to {sizes[-1]:,} bytes"
    return f"{article} {kind} of {count(len(values), 'byte string')} of {size}{' each' * (len(values) > 1)}"


def matches(feature: ManifestFeature, value) -> bool:
    """Whether a tf.train.Feature stores one record (one step) of ``feature`` as the manifest says."""
    kind = value.WhichOneof("kind")
    if kind != STORED[feature.deserialize_type]:
        # A feature with no list set holds no values, which is right only when none are expected.
        return kind is None and (feature.ragged or values_per_record(feature) == 0)
    values = getattr(value, kind).value
    per_row = values_per_record(feature)
    if len(values) != per_row and not (feature.ragged and len(values) % max(per_row, 1) == 0):
        return False
    if feature.deserialize_type == "raw":
        size = raw_bytes(feature)
        return all(len(v) == size for v in values)
    return True


def _names(names) -> str:
    names = sorted(names)
    shown_names = ", ".join(repr(n) for n in names[:5])
    return shown_names + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def check_record(serialized: bytes, manifest: Manifest, read_as: dict[str, tuple[str, ...]] | None = None,
                 named: bool = False) -> list[str]:
    """Problems of one serialized record against every feature of ``manifest``; empty when it agrees.

    Example records are read as SequenceExamples: an Example's features are
    the same protobuf field as a SequenceExample's context. ``read_as`` (stored
    name -> the tensors a config reads it as) checks those features only, and
    names the tensors in each problem; ``named`` names the manifest's file too (where the problem is read
    without the manifest at hand, as a pipeline's data error is).
    """
    the_manifest = f"the manifest {manifest.path}" if named else "the manifest"
    try:
        record = tf.train.SequenceExample.FromString(serialized)
    except DecodeError as error:
        kind = "SequenceExample" if manifest.allow_var_len else "Example"
        return [f"not a tf.train.{kind} protobuf ({error})"]
    context, lists = record.context.feature, record.feature_lists.feature_list
    if not manifest.allow_var_len and len(lists):
        return [f"holds feature lists ({_names(lists.keys())}), so it is a tf.train.SequenceExample, but "
                f"{the_manifest} says allow_var_len false: records must be tf.train.Example"]
    wanted = [f.name for f in manifest.features.values() if f.var_len and not f.ragged]
    if wanted and not len(lists):
        return [f"holds no feature lists, so it is a tf.train.Example (or a SequenceExample without its feature "
                f"lists), but {the_manifest} says allow_var_len true with feature lists {_names(wanted)}: records "
                "must be tf.train.SequenceExample"]
    problems = []
    for name, feature in manifest.features.items():
        if read_as is not None and name not in read_as:
            continue
        renamed = read_as is not None and read_as[name] != (name,)
        tensors = f" (read as {', '.join(repr(t) for t in read_as[name])})" if renamed else ""
        says = f"feature {name!r}{tensors}: {the_manifest} says {expectation(feature)}"
        if feature.var_len and not feature.ragged:
            if name not in lists:
                problems.append(f"{says}, found " + (f"a context feature ({describe_stored(context[name])})"
                                                      if name in context else
                                                      "no such feature list" + suggest(name, lists.keys())))
                continue
            steps = lists[name].feature
            bad = [i for i, step in enumerate(steps) if not matches(feature, step)]
            if bad:
                more = f" ({len(bad):,} of {count(len(steps), 'step')} are wrong)" if len(bad) > 1 else ""
                problems.append(f"{says}, found at step {bad[0]} {describe_stored(steps[bad[0]])}{more}")
                continue
            unfit = next(((i, v) for i, step in enumerate(steps) if (v := out_of_range(feature, step)) is not None),
                         None)
            if unfit is not None:
                problems.append(f"feature {name!r}{tensors}: {the_manifest} says dtype {feature.dtype}, found at step "
                                f"{unfit[0]} the value {unfit[1]!r}, which {feature.dtype} cannot hold")
        elif name not in context:
            if name in lists:
                problems.append(f"{says} (a context feature, var_len false), found a feature list of "
                                f"{count(len(lists[name].feature), 'step')}")
            else:
                problems.append(f"{says}, found no such feature{suggest(name, context.keys())}")
        elif not matches(feature, context[name]):
            problems.append(f"{says}, found {describe_stored(context[name])}")
        elif (unfit := out_of_range(feature, context[name])) is not None:
            problems.append(f"feature {name!r}{tensors}: {the_manifest} says dtype {feature.dtype}, found the value "
                            f"{unfit!r}, which {feature.dtype} cannot hold")
    return problems


# The range of each dtype narrower than what its deserialize_type stores (int64, float32) that a value read
# into it must fit; tf.cast would wrap an integer, or make a float infinite, without a word.
NARROWER = {("int", "int8"): (-2**7, 2**7 - 1), ("int", "int16"): (-2**15, 2**15 - 1),
            ("int", "int32"): (-2**31, 2**31 - 1), ("int", "uint8"): (0, 2**8 - 1), ("int", "uint16"): (0, 2**16 - 1),
            ("int", "uint32"): (0, 2**32 - 1),
            ("float", "float16"): (-65504.0, 65504.0)}


def out_of_range(feature: ManifestFeature, value) -> int | float | None:
    """The first value of a tf.train.Feature the manifest's dtype cannot hold, or None."""
    bounds = NARROWER.get((feature.deserialize_type, feature.dtype))
    if bounds is None:
        return None
    lo, hi = bounds
    # inf and NaN are held by float16 as they are: only a finite value can overflow.
    return next((v for v in getattr(value, STORED[feature.deserialize_type]).value
                 if not lo <= v <= hi and math.isfinite(v)), None)
