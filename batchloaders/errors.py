"""Errors a user can cause, each carrying where in which file it was found.

Every problem is a :class:`Problem` (file, JSON path, message, optional line).
One exception carries all problems found in a document, so a user fixes them
in one pass instead of one per run.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import difflib
import re
from typing import Iterable, Iterator, Sequence


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with one place in one file."""

    file: str
    path: str  # JSON path such as "$.args.primary_features[1].to_name"
    message: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = ""
        if self.line:
            where = f" (line {self.line}, column {self.column})" if self.column else f" (line {self.line})"
        return f"{self.file}: {self.path}: {self.message}{where}"


class BatchLoaderError(ValueError):
    """Base class of every error a user can cause with a config, manifest or data."""

    def __init__(self, problems: Problem | Sequence[Problem] | str):
        if isinstance(problems, str):
            problems = [Problem("<unknown>", "$", problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class ConfigError(BatchLoaderError):
    """A loader config is invalid."""


class PluginsNotChecked(ConfigError):
    """A config is valid as far as it was checked, but names types of plugins that were not imported
    (the command line imports a config's own plugins only with ``--trust-plugins``): one problem per
    item left unchecked. Raised only when nothing else is wrong."""


class ManifestError(BatchLoaderError):
    """A dataset manifest (or the dataset it describes) is invalid."""


class DataError(BatchLoaderError):
    """The records in the data files disagree with the manifest or the config."""


class ServiceError(BatchLoaderError):
    """The tf.data service a config names cannot be used (its dispatcher does not answer)."""


class ResumeError(BatchLoaderError):
    """A checkpoint of the position in the data does not fit the pipeline it is restored into."""


# What the pipeline's own checks (integrity.py, parsing.py) and TensorFlow's parse errors say, once
# the record names the parse calls get ('path: record N') are in them.
# The assertion's text ends the line (a node's name follows on the next), or, raised by a function
# run in the calling thread (inline_map.py), the op's name follows on the same line.
_ASSERTION = re.compile(r"assertion failed: \[(?P<text>.*?)\]\s*(?:\n|\[Op:|$)", re.S)
# A record is named 'path: record N', or 'path: record F+j' (the j-th of a block whose first is F).
_PARSE_NAME = re.compile(r"Name: (?P<file>.*?): record (?P<record>\d+(?:\+\d+)?), (?P<text>.*?)(?: \[Op:|\n|$)", re.S)
# A block named as a whole (naming.BlockNames): 'path: records F..L'; parse_example then gives the
# record's place in it, or (a missing feature) nothing, and the block is read again to find it.
_PARSE_BLOCK = re.compile(r"Name: (?P<file>.*?): records (?P<first>\d+)\.\.(?P<last>\d+), "
                          r"(?P<text>.*?)(?: \[Op:|\n|$)", re.S)
_INDEX = re.compile(r"^Key: [^,]*, Index: (?P<index>\d+)\.")
_MISSING = re.compile(r"^Feature: (?P<feature>.*?) \(data type: [^)]*\) is required but could not be found")
MARKER = "batchloaders data error"  # begins the message of every damaged-file error integrity.py raises
_DATA_ERROR = re.compile(rf"^(?P<file>.*?): (?P<where>{MARKER} at byte \d+[^:]*|record \d+(?:\+\d+)?): (?P<text>.*)$", re.S)


# A config item's own check (building.py): 'source: $.json.path: text', or '<a processing step>: text'.
_PLACED = re.compile(r"^(?P<file>[^\n]*?): (?P<path>\$(?:\.\w+|\[\d+\]|\['(?:[^'\\]|\\.)*'\])*): (?P<text>.*)$|"
                     r"^(?P<file2><a processing step>): (?P<text2>.*)$", re.S)
# The name scope of every op of a decode_image step (transform/steps/decode_image.py), in the node names
# TensorFlow's errors carry.
IMAGE_SCOPE = "batchloaders_decode_image"
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
# A file that cannot be opened while the pipeline runs (integrity._opened): "...: PATH; No such file or directory".
_OPEN_ERRORS = {"NotFoundError", "PermissionDeniedError", "FailedPreconditionError", "UnavailableError"}
_OPEN = re.compile(r"^[^\n]*?: (?P<file>(?:(?!: )[^;\n])+); (?P<text>[^\n\[]+)")


def _record(where: str) -> str:
    """'record F+j' as 'record N' (N = F + j); anything else as it is."""
    found = re.fullmatch(r"record (\d+)\+(\d+)", where)
    return f"record {int(found.group(1)) + int(found.group(2))}" if found else where


def data_error_from(error: BaseException, locators=None) -> "DataError | None":
    """The DataError a TensorFlow error raised while a dataset ran stands for, or None if it is not a data error.

    TensorFlow errors raised inside a running tf.data pipeline cannot be of our
    classes; their messages start (after TensorFlow's own prefix) with the data
    file's path. This turns them back into a DataError naming file, record and problem.
    ``locators`` (located.Locator, newest last) read a record again to say what is wrong with it in the
    manifest's words, and find the record when TensorFlow names none.
    """
    locators = list(LOCATORS if locators is None else locators)[::-1]
    message = getattr(error, "message", None)
    if isinstance(error, UnicodeDecodeError) and isinstance(error.object, bytes) and error.object.startswith(
            b"{{function_node"):
        # TensorFlow quotes a record it cannot parse in its error; bytes that are not UTF-8 break the
        # conversion of that error to Python, and a UnicodeDecodeError carrying its text comes out instead.
        message = error.object.decode("utf-8", "replace")
    elif not isinstance(message, str) or not type(error).__module__.startswith("tensorflow"):
        return None
    if _NOT_A_PROTO in message:
        return DataError(Problem("<a data file>", "record", (
            "a record is not a tf.train.Example or SequenceExample protobuf at all (TensorFlow's parser does not "
            "say in which file or record: `batchloaders verify CONFIG` names them)")))
    found = _TOO_MANY.search(message)
    if found:
        return DataError(Problem("<the manifest>", "$.files", (
            f"the data gave more batches than the record counts the manifest's files list allow "
            f"({found.group('expected')}): a listed count is too small, or a file changed after the manifest was "
            "written (`batchloaders verify CONFIG` names it)")))
    # An op of a decode_image step failed on the bytes it was given: TensorFlow names no record.
    if IMAGE_SCOPE in message and type(error).__name__ == "InvalidArgumentError":
        return _searched_images(" ".join(message.split("\n")[0].split()), locators)
    found = _ASSERTION.search(message)
    if found:
        data = _DATA_ERROR.match(found.group("text").replace("\\'", "'"))
        if data:
            return DataError(Problem(data.group("file"), _record(data.group("where")), data.group("text").strip()))
        placed = _PLACED.match(found.group("text").replace("\\'", "'"))
        if placed:  # a config item's check of the values it was given (building.py)
            if placed.group("file2"):
                return DataError(Problem(placed.group("file2"), "$", placed.group("text2").strip()))
            return DataError(Problem(placed.group("file"), placed.group("path"), placed.group("text").strip()))
        return None
    found = _OPEN.search(message) if type(error).__name__ in _OPEN_ERRORS else None
    if found:
        return DataError(Problem(found.group("file").strip(), "open", (
            f"the data file cannot be opened: {found.group('text').strip()} (was it deleted, moved or made "
            "unreadable after the pipeline was built?)")))
    found = _PARSE_NAME.search(message)
    if found:
        text = " ".join(found.group("text").split())
        record = int(_record(f"record {found.group('record')}").split()[-1])
        return _explained(found.group("file"), record, f"the record disagrees with the manifest: {text}", locators)
    found = _PARSE_BLOCK.search(message)
    if found:
        text = " ".join(found.group("text").split())
        path, first, last = found.group("file"), int(found.group("first")), int(found.group("last"))
        index, missing = _INDEX.search(text), _MISSING.search(text)
        if index:
            record = first + int(index.group("index"))
        else:
            record = _lacking(path, first, last, missing.group("feature")) if missing else None
        if record is not None:
            return _explained(path, record, f"the record disagrees with the manifest: {text}", locators)
        return DataError(Problem(path, f"one of records {first} to {last}",
                                 f"the record disagrees with the manifest: {text}"))
    found = _UNNAMED.search(message)
    if found:
        return _searched(found.group("feature"), " ".join(message.split("\n")[0].split()), locators)
    return None


def _explained(path: str, record: int, text: str, locators) -> "DataError":
    """The DataError of record ``record`` of ``path``, in the manifest's words when a locator can read it again."""
    for locator in locators:
        if locator.knows(path):
            text = locator.explain(path, record) or text
            break
    return DataError(Problem(path, f"record {record}", text))


def _searched(feature: str | None, tf_text: str, locators) -> "DataError":
    """A parse error TensorFlow names no record in: the first record that disagrees, found by reading the files
    of the pipelines that read ``feature`` (only the newest one's when no feature is named), within one time
    bound in all."""
    import time

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


def _searched_images(tf_text: str, locators) -> "DataError":
    """An image a decode_image step could not decode (TensorFlow names no record): the first record, in file
    order, whose image the steps cannot decode, of the pipelines with such steps (newest first), within one
    time bound in all."""
    import time

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


# TensorFlow's prefix naming its own function and iterator, which tells a user nothing.
_TF_NOISE = re.compile(r"\{\{function_node [^}]*\}\}|Error in user-defined function passed to \S+ transformation "
                       r"with iterator: \S+: ")


def _lacking(path: str, first: int, last: int, feature: str) -> int | None:
    """The first record from ``first`` to ``last`` of ``path`` without ``feature``, read again; None if none is
    found that way (the file changed, or cannot be read again)."""
    import tensorflow as tf  # only here: errors.py is imported where TensorFlow is not

    for compression in ("", "GZIP", "ZLIB"):
        try:
            records = tf.data.TFRecordDataset(path, compression_type=compression).skip(first).take(last - first + 1)
            for j, serialized in enumerate(records.as_numpy_iterator()):
                value = tf.train.Example.FromString(serialized).features.feature.get(feature)
                if value is None or value.WhichOneof("kind") is None:  # absent, or present with no list set
                    return first + j
        except Exception:  # noqa: BLE001 - another compression, or the file is gone: then no record
            continue
    return None


@contextlib.contextmanager
def data_errors() -> Iterator[None]:
    """Raise data errors of a running pipeline as :class:`DataError`, which names the file and record.

    >>> with batchloaders.data_errors():
    ...     model.fit(input_fn(), epochs=3, shuffle=False)
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


def path_parts(path: str) -> tuple:
    """The inverse of :func:`json_path`: "$.args.x[1]" -> ("args", "x", 1)."""
    return tuple(int(index) if index else (key or quoted)
                 for key, index, quoted in re.findall(r"\.([A-Za-z_]\w*)|\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]", path))


def json_path(parts: Iterable[str | int]) -> str:
    """Render path components as a JSON path: ("args", "x", 1) -> "$.args.x[1]"."""
    out = "$"
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
            continue
        part = str(part)
        if part.isidentifier():
            out += f".{part}"
        else:
            out += f"[{part!r}]"
    return out


# What a bare type name means to a Keras user, where spelling alone would pick another: Keras's float
# type; the integer type TFRecord files store (int64_list) and tf.data counts in; NumPy's and C's names.
MEANT = {"float": "float32", "int": "int64", "integer": "int64", "long": "int64", "double": "float64",
         "bytes": "string"}


def suggest(name: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean 'x'?)' for the choice meant or the closest one, or '' if none is close."""
    choices = [str(c) for c in choices]
    name = str(name)
    meant = MEANT.get(name.lower(), name.lower())
    if meant != name and meant in choices:
        return f" (did you mean {meant!r}?)"
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
