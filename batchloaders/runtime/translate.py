"""TensorFlow's errors of a running pipeline read back as the DataError they stand for.

TensorFlow errors raised inside a running tf.data pipeline cannot be of our classes; their messages
start (after TensorFlow's own prefix) with the data file's path, as the pipeline's own checks and the
record names the parse calls get (read/naming.py) put it. :func:`data_error_from` turns such an error
back into a DataError naming file, record and problem: each reader of :data:`_READERS` looks for one
kind of message, the first that recognizes the message says what it stands for. The record finders
(runtime/located.py) of the pipelines built in this process (:data:`LOCATORS`) read a record again to
say what is wrong with it in the manifest's words, and find the record when TensorFlow names none.
"""
from __future__ import annotations

import collections
import contextlib
import os
import re
import time
from typing import Iterator

import tensorflow as tf

from batchloaders.errors import BatchLoaderError, DataError, Problem
from batchloaders.loaders import continuous_sequence
from batchloaders.read import naming
from batchloaders.read.proven import CHECKED, ENDED, OPENED, PROBE_BYTES, WHY
from batchloaders.transform.steps.decode_image import SCOPE as IMAGE_SCOPE

# What the pipeline's own checks (integrity.py, parsing.py) say, inside TensorFlow's assertion message.
# The assertion's text ends the line (a node's name follows on the next), or, raised by a function
# run in the calling thread (inline_map.py), the op's name follows on the same line.
ASSERTION = re.compile(r"assertion failed: \[(?P<text>.*?)\]\s*(?:\n|\[Op:|$)", re.S)
# A damaged file (integrity.py): 'path: batchloaders data error at byte B[, after record N ...]: text'.
_DAMAGED = re.compile(rf"^(?P<file>.*?): (?P<where>{naming.MARKER} at byte \d+[^:]*): (?P<text>.*)$", re.S)
# continuous_sequence's check of a block's records' feature lengths: 'path: text (x, y): listed', then the names
# of the records that differ and their lengths ('] [@xxxxxxx:F+j ...] [[3 2]...').
_LENGTHS = re.compile(rf"^(?P<path>.*?): {re.escape(continuous_sequence.LENGTHS_DIFFER)} \((?P<features>.*)\): "
                      rf"{re.escape(continuous_sequence.LISTED)}\] \[{naming.RECORD}[^\]]*\] \[\[?(?P<lengths>[\d ]+)",
                      re.S)
# A record's check (parsing.py, the sequence loaders): 'path: record N: text'.
_CHECKED = re.compile(rf"^{naming.RECORD}: (?P<text>.*)$", re.S)
# TensorFlow's parse errors quote the record's name: 'Name: path: record N, text' ...
_PARSE_NAME = re.compile(rf"Name: {naming.RECORD}, (?P<text>.*?)(?: \[Op:|\n|$)", re.S)
# ... or a block's ('Name: path: records F..L, text'); parse_example then gives the record's place in
# it, or (a missing feature) nothing, and the block is read again to find it.
_PARSE_BLOCK = re.compile(rf"Name: {naming.BLOCK}, (?P<text>.*?)(?: \[Op:|\n|$)", re.S)
_INDEX = re.compile(r"^Key: [^,]*, Index: (?P<index>\d+)\.")
_MISSING = re.compile(r"^Feature: (?P<feature>.*?) \(data type: [^)]*\) is required but could not be found")
# A config item's own check (building.py): 'source: $.json.path: text', or '<a processing step>: text'.
_PLACED = re.compile(r"^(?P<file>[^\n]*?): (?P<path>\$(?:\.\w+|\[\d+\]|\['(?:[^'\\]|\\.)*'\])*): (?P<text>.*)$|"
                     r"^(?P<file2><a processing step>): (?P<text2>.*)$", re.S)
SEARCH_SECONDS = 60.0  # how long a search for a record TensorFlow did not name may read, in all
_NOT_A_PROTO = "Could not parse example input"
# parse_sequence_example checks a feature list's values over the whole batch and names no record.
_UNNAMED = re.compile(r"Feature list '(?P<feature>[^']*)' has an unexpected number of values|"
                      r"\{\{node ParseSequenceExample|\{\{node ParseExample")
# The record finders (located.Locator) of the pipelines built in this process, newest last: data_errors()
# asks them where a record TensorFlow did not name is, and what is wrong with one it did.
LOCATORS: collections.deque = collections.deque(maxlen=16)
# assert_cardinality (independent loader, counts listed): more records than the manifest lists.
_TOO_MANY = re.compile(r"Input dataset was expected to contain (?P<expected>\d+) elements? but contained at least")
# ... and fewer: a file cut while the run read it, past the check of its size when it opened (read/proven.py).
_TOO_FEW = re.compile(r"Input dataset was expected to contain (?P<expected>\d+) elements? but contained only "
                      r"(?P<found>\d+)")
# TensorFlow's reader on a damaged frame, or a file that ends inside a payload (read/proven.py reads without
# the accounting that names the file): 'corrupted record at B', 'truncated record at B'.
_FRAME = re.compile(r"(?:corrupted|truncated) record at (?P<at>\d+)")
# A file that cannot be opened while the pipeline runs (integrity._opened): "...: PATH; No such file or directory".
_OPEN_ERRORS = {"NotFoundError", "PermissionDeniedError", "FailedPreconditionError", "UnavailableError"}
# ... or, raised by a reader in the iterator's own dataset graph: "{{function_node ...}} PATH; No such file ...".
_OPEN = re.compile(r"^[^\n]*?(?:: |\}\} )(?P<file>(?:(?!: )[^;\n])+); (?P<text>[^\n\[]+)")
# TensorFlow's prefix naming its own function and iterator, which tells a user nothing.
_TF_NOISE = re.compile(r"\{\{function_node [^}]*\}\}|Error in user-defined function passed to \S+ transformation "
                       r"with iterator: \S+: ")
_PASS = object()  # a reader's answer for a message it does not read


def data_error_from(error: BaseException, locators=None) -> DataError | None:
    """The DataError a TensorFlow error raised while a dataset ran stands for, or None if it is not a data error.

    Args:
        error: what a running pipeline raised.
        locators: the record finders (located.Locator, newest last) that read a record again to say what is
            wrong with it in the manifest's words, and find the record when TensorFlow names none; default:
            those of every pipeline built in this process.

    Returns:
        The DataError naming file, record (or config path) and problem; None for an error that is no data
        error (or not one this package can place).
    """
    message = _message(error)
    if message is None:
        return None
    newest_first = list(LOCATORS if locators is None else locators)[::-1]
    for reader in _READERS:
        converted = reader(error, message, newest_first)
        if converted is not _PASS:
            return converted
    return None


def _message(error: BaseException) -> str | None:
    """The text of a TensorFlow error; None for an error TensorFlow did not raise."""
    if isinstance(error, UnicodeDecodeError) and isinstance(error.object, bytes) and error.object.startswith(
            b"{{function_node"):
        # TensorFlow quotes a record it cannot parse in its error; bytes that are not UTF-8 break the
        # conversion of that error to Python, and a UnicodeDecodeError carrying its text comes out instead.
        return error.object.decode("utf-8", "replace")
    message = getattr(error, "message", None)
    if not isinstance(message, str) or not type(error).__module__.startswith("tensorflow"):
        return None
    return message


def _not_a_proto(error, message: str, locators):
    """Bytes that are no protobuf: TensorFlow's parser names no file."""
    if _NOT_A_PROTO not in message:
        return _PASS
    return DataError(Problem("<a data file>", "record", (
        "a record is not a tf.train.Example or SequenceExample protobuf at all (TensorFlow's parser does not "
        "say in which file or record: `batchloaders verify CONFIG` names them)")))


def _too_many(error, message: str, locators):
    """More records than the manifest's counts allow (the declared cardinality)."""
    found = _TOO_MANY.search(message)
    if not found:
        return _PASS
    return DataError(Problem(_manifests(locators), "$.files", (
        f"the data gave more batches than the record counts the manifest's files list allow "
        f"({found.group('expected')}): a listed count is too small, or a file changed after the manifest was "
        f"written (`batchloaders verify CONFIG` names it){_PROBED if _sizes_checked(locators) else ''}")))


# Said of a count error in pipelines that check files' sizes, when no file measures other than listed now.
_PROBED = ("; or a data file was not the size its manifest lists when the run checked it (counted in bytes, "
           "and that check names no file), and is that size again now")


def _sizes_checked(locators) -> bool:
    return any(getattr(locator, "proven", False) for locator in locators)


def _manifests(locators) -> str:
    """The manifests of the pipelines ``locators`` know, newest first (one of them declared the count)."""
    paths = list(dict.fromkeys(locator.manifest.path for locator in locators if locator.manifest.path))
    return ", ".join(paths) or "<the manifest>"


def _too_few(error, message: str, locators):
    """Fewer batches than the manifest's counts make (the declared cardinality)."""
    found = _TOO_FEW.search(message)
    if not found:
        return _PASS
    return DataError(Problem(_manifests(locators), "$.files", (
        f"the data gave {found.group('found')} batches, fewer than the {found.group('expected')} the record counts "
        "the manifest's files list make: a file was cut or changed while the run read it, or a listed count is "
        f"too large (`batchloaders verify CONFIG` names the file){_PROBED if _sizes_checked(locators) else ''}")))


def _image(error, message: str, locators):
    """An op of a decode_image step failed on the bytes it was given: TensorFlow names no record."""
    if IMAGE_SCOPE not in message or type(error).__name__ != "InvalidArgumentError":
        return _PASS
    return _searched_images(" ".join(message.split("\n")[0].split()), locators)


def _assertion(error, message: str, locators):
    """The pipeline's own checks: a damaged file, a record's check, or a config item's check of its values
    (building.py); None for another assertion."""
    found = ASSERTION.search(message)
    if not found:
        return _PASS
    text = found.group("text").replace("\\'", "'")
    damaged = _DAMAGED.match(text)
    if damaged:
        return _damaged(damaged.group("file"), damaged.group("where"), damaged.group("text").strip())
    differ = _LENGTHS.match(text)
    if differ:
        record = naming.named(differ)
        path = differ.group("path") if record.path == naming.UNKNOWN else record.path  # (another process's)
        lengths = [int(n) for n in differ.group("lengths").split()]
        return DataError(Problem(path, f"record {record.first}", continuous_sequence.lengths_differ(
            differ.group("features").split(", "), lengths)))
    checked = _CHECKED.match(text)
    if checked:
        record = naming.named(checked)
        return DataError(Problem(record.path, f"record {record.first}", checked.group("text").strip()))
    placed = _PLACED.match(text)
    if not placed:
        return None
    if placed.group("file2"):
        return DataError(Problem(placed.group("file2"), "$", placed.group("text2").strip()))
    return DataError(Problem(placed.group("file"), placed.group("path"), placed.group("text").strip()))


def _damaged(path: str, where: str, text: str) -> DataError:
    """A damaged file's DataError."""
    return DataError(Problem(path, where, text))


def is_count_error(message: str) -> bool:
    """Whether ``message`` is an ``assert_cardinality`` failure: read/proven.py's size probes, or the independent
    loader's declared batch count (neither names a file)."""
    return bool(_TOO_MANY.search(message) or _TOO_FEW.search(message))


def _size_changed(error, message: str, locators):
    """A data file no longer the size its manifest lists, read without the accounting (read/proven.py): its
    size probes fail with a count of bytes, the independent loader's declared batch count with one of batches,
    and neither names the file; the files of those pipelines are measured again. None changed: the count's
    own message (:func:`_too_many`, :func:`_too_few`)."""
    found = _TOO_MANY.search(message) or _TOO_FEW.search(message)
    changed = None
    for locator in (locators if found else ()):
        changed = locator.changed_size() if getattr(locator, "proven", False) else None
        if changed is not None:
            break
    if changed is None:
        return _PASS
    path, listed, now = changed
    if now is None:
        return DataError(Problem(path, "open", "the data file cannot be opened (was it deleted, moved or made "
                                               "unreadable after the pipeline was built?)"))
    # The count says which probe failed (bytes: 1 when it opened, 2 at its end); any other count is the declared
    # batch count's, which a file cut while the run read it makes fall short.
    probes = {str(count): when for when, count in PROBE_BYTES.items()}
    when = probes.get(found.group("expected"), CHECKED if found.group("expected") == "0" else ENDED)
    return DataError(Problem(path, f"{naming.MARKER} at byte {min(now, listed)}", (
        f"the manifest {locator.manifest.path} lists {listed} bytes for this file (size_bytes), but it is {now} "
        f"bytes {when}: {WHY[when]} (`batchloaders verify` says what changed, `batchloaders manifest DIR` "
        "records it anew)")))


def _frame(error, message: str, locators):
    """TensorFlow's reader failed on a record and names no file, in a pipeline reading without the accounting
    (read/proven.py): the file and record found by reading those pipelines' files again (newest first), the
    one failing at the byte the error names first, within one time bound in all. Another pipeline's error
    (the user's own tf.data reading, say) is not ours."""
    found = _FRAME.search(message) if type(error).__name__ == "DataLossError" else None
    proven = [locator for locator in locators if getattr(locator, "proven", False)]
    if found is None or not proven:
        return _PASS
    at, deadline, exact, first = int(found.group("at")), time.monotonic() + SEARCH_SECONDS, None, None
    for locator in proven:
        left = deadline - time.monotonic()
        damage = locator.damaged(at, left) if left > 0 else None
        if damage is not None and damage.exact:
            exact = damage
            break
        first = first or damage
    damage = exact or first
    if damage is not None:
        after = (f", after record {damage.record - 1} (the last good one; records count from 0)" if damage.record
                 else ", before the first record")
        return DataError(Problem(damage.path, f"{naming.MARKER} at byte {damage.offset}{after}", (
            "a record frame or checksum is damaged there, or the file ends inside a record (is it a TFRecord "
            "file, and uncompressed, as the manifest says?)")))
    said = _TF_NOISE.sub("", " ".join(message.split("\n")[0].split())).strip()
    return DataError(Problem("<a data file>", "record", (
        f"a data file is damaged ({said}); TensorFlow does not say which, and reading the data files again "
        f"(for {SEARCH_SECONDS:g} s at most) did not find it: `batchloaders verify CONFIG` names it")))


def _unopened(error, message: str, locators):
    """A data file that cannot be opened while the pipeline runs."""
    found = _OPEN.search(message) if type(error).__name__ in _OPEN_ERRORS else None
    if not found:
        return _PASS
    return DataError(Problem(found.group("file").strip(), "open", (
        f"the data file cannot be opened: {found.group('text').strip()} (was it deleted, moved or made "
        "unreadable after the pipeline was built?)")))


def _parsed_record(error, message: str, locators):
    """A parse error naming its record."""
    found = _PARSE_NAME.search(message)
    if not found:
        return _PASS
    text = " ".join(found.group("text").split())
    record = naming.named(found)
    return _explained(record.path, record.first, f"the record disagrees with the manifest: {text}", locators)


def _parsed_block(error, message: str, locators):
    """A parse error naming a block: the record by its index in the block, or by reading the block again."""
    found = _PARSE_BLOCK.search(message)
    if not found:
        return _PASS
    text = " ".join(found.group("text").split())
    block = naming.named(found)
    index, missing = _INDEX.search(text), _MISSING.search(text)
    if index:
        record = block.first + int(index.group("index"))
    else:
        record = _lacking(block, missing.group("feature")) if missing else None
    if record is not None:
        return _explained(block.path, record, f"the record disagrees with the manifest: {text}", locators)
    return DataError(Problem(block.path, f"one of records {block.first} to {block.last}",
                             f"the record disagrees with the manifest: {text}"))


def _unnamed(error, message: str, locators):
    """A parse error naming no record: found by reading the files again."""
    found = _UNNAMED.search(message)
    if not found:
        return _PASS
    return _searched(found.group("feature"), " ".join(message.split("\n")[0].split()), locators)


# In the order they are asked: the first that reads the message answers.
_READERS = (_not_a_proto, _size_changed, _too_many, _too_few, _image, _assertion, _frame, _unopened, _parsed_record, _parsed_block, _unnamed)


def _explained(path: str, record: int, text: str, locators) -> DataError:
    """The DataError of record ``record`` of ``path``, in the manifest's words when a locator can read it again."""
    for locator in locators:
        if locator.knows(path):
            text = locator.explain(path, record) or text
            break
    return DataError(Problem(path, f"record {record}", text))


def _searched(feature: str | None, tf_text: str, locators) -> DataError:
    """A parse error TensorFlow names no record in: the first record that disagrees, found by reading the files
    of the pipelines that read ``feature`` (only the newest one's when no feature is named), within one time
    bound in all."""
    deadline = time.monotonic() + SEARCH_SECONDS
    candidates = [locator for locator in locators if feature is None or feature in locator.read_as]
    for locator in candidates[:1] if feature is None else candidates:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        found = locator.find(feature, left)
        if found is not None:
            return DataError(Problem(found[0], f"record {found[1]}", found[2]))
    said = _TF_NOISE.sub("", tf_text).strip()
    return DataError(Problem("<a data file>", "record", (
        f"a record disagrees with the manifest ({said}); TensorFlow does not say which: "
        "`batchloaders verify CONFIG` names it")))


def _searched_images(tf_text: str, locators) -> DataError:
    """An image a decode_image step could not decode (TensorFlow names no record): the first record, in file
    order, whose image the steps cannot decode, of the pipelines with such steps (newest first), within one
    time bound in all."""
    deadline = time.monotonic() + SEARCH_SECONDS
    for locator in locators:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        found = locator.find(None, left, images=True) if getattr(locator, "images", None) else None
        if found is not None:
            return DataError(Problem(found[0], f"record {found[1]}", found[2]))
    said = _TF_NOISE.sub("", tf_text).strip()
    return DataError(Problem("<a data file>", "record", (
        f"an image does not decode ({said}); TensorFlow does not say which, and reading the data files again "
        f"(for {SEARCH_SECONDS:g} s at most) did not find it")))


def _lacking(block: naming.Named, feature: str) -> int | None:
    """The first record of ``block`` without ``feature``, read again; None if none is found that way (the file
    changed, or cannot be read again)."""
    for compression in ("", "GZIP", "ZLIB"):
        try:
            records = tf.data.TFRecordDataset(block.path, compression_type=compression).skip(block.first).take(
                block.last - block.first + 1)
            for j, serialized in enumerate(records.as_numpy_iterator()):
                value = tf.train.Example.FromString(serialized).features.feature.get(feature)
                if value is None or value.WhichOneof("kind") is None:  # absent, or present with no list set
                    return block.first + j
        except Exception:  # noqa: BLE001 - another compression, or the file is gone: then no record
            continue
    return None


@contextlib.contextmanager
def data_errors() -> Iterator[None]:
    """Raise data errors of a running pipeline as :class:`DataError`, which names the file and record.

    >>> with batchloaders.data_errors():
    ...     model.fit(input_fn(), epochs=3, shuffle=False)

    Yields:
        Nothing, while the ``with`` block runs; its errors are read as they are raised.

    Raises:
        DataError: for a TensorFlow error :func:`data_error_from` reads as one (chained to it); any other
            error is raised as it is.
    """
    try:
        yield
    except BatchLoaderError:
        raise
    except Exception as error:
        converted = data_error_from(error)
        if converted is None:
            raise
        raise converted from error
