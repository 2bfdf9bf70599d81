"""How records are named in messages, so that errors say which record of which file: the one writer
and the one reader of those names.

A record is named ``'path: record N'`` (:func:`record_name`, :func:`record_name_parts` in a graph). The
parse ops get a name for every record they parse, and a long path copied into each is a cost (a string
that long is allocated each time): they get a token that stands for the path instead (``@xxxxxxx``, a
hash of it: :func:`token`), short enough for TensorFlow's strings to hold in place: ``'@xxxxxxx:N'``
(:func:`record_names`). For a block of one file's records (the independent loader's unshuffled fixed-size
path), even a string per record is a real share of an epoch of small records
(docs/decisions/performance.md); the block is named instead: every record of it gets the same
``'@xxxxxxx:F..L'`` (:class:`BlockNames`). TensorFlow's parse errors then say the record's place in the
block (``Key: x, Index: j``), our own checks name it exactly (:meth:`BlockNames.at`), and an error that
says neither (a missing feature) is located by ``runtime/translate.py`` reading the block again. Feature
lists, whose parse errors do not say the record's place in the batch, get ``'@xxxxxxx:F+j'``
(:class:`EachInBlock`): the j-th record of a block whose first is F. Our own checks' messages name a record
in full, ``'path: record N'`` (each kind's ``at``), so that they read as they are where nothing translates
them.

Reading a name back: :data:`RECORD` and :data:`BLOCK` match the names inside a message (the groups
``file`` or ``token``, ``record``, ``plus``; ``file`` or ``token``, ``first``, ``last``), :func:`named` says
which records a match names, and :func:`parse` reads a whole name.
"""
from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import re
import threading

import tensorflow as tf

# A record name inside a message: 'path: record N', 'path: record F+j' (record F + j), or '@xxxxxxx:F+j' (a
# token standing for the path: :func:`token`).
RECORD = r"(?:@(?P<token>[a-z2-7]{7}):|(?P<file>.*?): record )(?P<record>\d+)(?:\+(?P<plus>\d+))?"
# A block named as a whole: 'path: records F..L', or by its file's token (:func:`token`): '@xxxxxxx:F..L'.
BLOCK = r"(?:@(?P<token>[a-z2-7]{7}):|(?P<file>.*?): records )(?P<first>\d+)\.\.(?P<last>\d+)"
# Characters of a token after its '@' (base32 of the path's SHA-256): 35 bits, no collision in practice.
TOKEN_CHARS = 7
# Begins what follows the path in the message of every damaged-file error the reader raises
# (read/integrity.py): 'path: batchloaders data error at byte B, ...: what is wrong'.
MARKER = "batchloaders data error"


def record_name(path: str, record: int) -> str:
    """``'path: record N'``: record ``record`` (counted from 0) of data file ``path``."""
    return f"{path}: record {record}"


def record_name_parts(path, record) -> list:
    """The pieces of ``'path: record N'`` for a ``tf.strings.join`` (which may join more after them: one
    join, one graph node); ``path`` a string tensor, ``record`` an int64 tensor."""
    return [path, ": record ", tf.strings.as_string(tf.cast(record, tf.int64))]


@dataclasses.dataclass(frozen=True)
class Named:
    """The records ``first`` to ``last`` (one record when equal) of data file ``path``, read from a name."""

    path: str
    first: int
    last: int

    @property
    def record(self) -> int | None:
        """The one record named, or None for a block."""
        return self.first if self.first == self.last else None


# The paths :func:`token` has given tokens for in this process: token -> path.
_PATHS: dict[str, str] = {}
_LOCK = threading.Lock()
# What a token no path of this process has stands for (a name made by a graph of other data files).
UNKNOWN = "<a data file>"


def _digest(path: str) -> str:
    return "@" + base64.b32encode(hashlib.sha256(path.encode()).digest()).decode()[:TOKEN_CHARS].lower()


def token(path: str) -> str:
    """``'@xxxxxxx'``: the short stand-in for data file ``path`` in block names, the same in every process (a
    hash of the path: pipelines built in another order, or in another process, make the same graph).

    Args:
        path: a data file's path.

    Returns:
        The token, read back as ``path`` by :func:`named` in a process that asked for it.
    """
    given = _digest(path)
    with _LOCK:
        _PATHS.setdefault(given, path)
    return given


def mentions(message: str, path: str) -> bool:
    """Whether ``message`` names data file ``path``: its path, or its token (:func:`token`) in a block's name.

    Args:
        message: an error's text.
        path: a data file's path.

    Returns:
        True when the path, or its token followed by ':', is in the message.
    """
    return path in message or f"{_digest(path)}:" in message


def _path_of(given: str) -> str:
    return _PATHS.get("@" + given, UNKNOWN)


def named(found: re.Match) -> Named:
    """The records a match of :data:`RECORD` or :data:`BLOCK` names ('record F+j' is record F + j)."""
    groups = found.groupdict()
    path = groups["file"] if groups.get("token") is None else _path_of(groups["token"])
    if groups.get("record") is not None:
        record = int(groups["record"]) + int(groups.get("plus") or 0)
        return Named(path, record, record)
    return Named(path, int(groups["first"]), int(groups["last"]))


def parse(name: str) -> Named | None:
    """The records a whole name names (any of the forms above); None for a string that is no record name."""
    found = re.fullmatch(BLOCK, name, re.S) or re.fullmatch(RECORD, name, re.S)
    return named(found) if found else None


@dataclasses.dataclass(frozen=True)
class BlockNames:
    """The records ``first``, ``first + 1``, ... (``count`` of them) of the data file ``path``."""

    path: tf.Tensor  # scalar string
    first: tf.Tensor  # scalar int64
    count: tf.Tensor  # scalar int32
    token: tf.Tensor | None = None  # scalar string: the path's token (:func:`token`), which the parse ops get

    def vector(self) -> tf.Tensor:
        """[count] copies of 'path: records F..L' (or '@xxxxxxx:F..L' given the token): what the parse ops get (a
        fill, no string formatted per record)."""
        last = self.first + tf.cast(self.count, tf.int64) - 1
        head = [self.path, ": records "] if self.token is None else [self.token, ":"]
        span = tf.strings.join(head + [tf.strings.as_string(self.first), "..", tf.strings.as_string(last)])
        return tf.fill([self.count], span)

    def at(self, j: tf.Tensor) -> tf.Tensor:
        """'path: record N' of the j-th record (what a check's message names)."""
        return tf.strings.join(record_name_parts(self.path, self.first + tf.cast(j, tf.int64)))


@functools.lru_cache(maxsize=32)
def tokens(paths: tuple[str, ...]) -> tuple[str, ...]:
    """:func:`token` of each path (computed once per tuple of paths: a trace may ask for 100,000 of them).

    Args:
        paths: data files' paths.

    Returns:
        Their tokens, in order.
    """
    return tuple(token(path) for path in paths)


@dataclasses.dataclass(frozen=True)
class RecordNames:
    """Record ``record[i]`` of the data file ``paths[file_index[i]]``, for each i (a batch's records)."""

    paths: tuple[str, ...]
    file_index: tf.Tensor  # [B] int
    record: tf.Tensor  # [B] int

    def vector(self) -> tf.Tensor:
        """'@xxxxxxx:N' of each record (its file's token): what the parse ops get, short enough for TensorFlow
        to hold in place (a path copied into every record's name was a share of a batch's parse)."""
        files = tf.gather(tf.constant(tokens(self.paths)), self.file_index)
        return tf.strings.join([files, ":", tf.strings.as_string(tf.cast(self.record, tf.int64))])

    def at(self, j: tf.Tensor) -> tf.Tensor:
        """'path: record N' of the j-th record (what a check's message names); '' one past the last."""
        path = tf.gather(tf.constant(list(self.paths)), self.file_index[j:j + 1])
        return tf.strings.reduce_join(tf.strings.join(record_name_parts(path, self.record[j:j + 1])))


def record_names(paths, file_index: tf.Tensor, record: tf.Tensor) -> RecordNames:
    """The names of a batch's records, each of its own file (:class:`RecordNames`).

    Args:
        paths: the data files ``file_index`` counts in.
        file_index: each record's file, an int tensor.
        record: each record's number in its file.

    Returns:
        The names: '@xxxxxxx:N' for the parse ops (:func:`vector`), 'path: record N' for a check's message
        (:func:`at`); both read back by :func:`named` as the files' records.
    """
    return RecordNames(tuple(paths), file_index, record)


def full_record_names(paths, file_index: tf.Tensor, record: tf.Tensor) -> tf.Tensor:
    """'path: record N' of each record (a check's message, which reads as it is without being translated).

    Args:
        paths: the data files ``file_index`` counts in.
        file_index: each record's file, an int tensor.
        record: each record's number in its file.

    Returns:
        The names.
    """
    names = tf.gather(tf.constant(list(paths)), file_index)
    return tf.strings.join(record_name_parts(names, record))


@dataclasses.dataclass(frozen=True)
class EachInBlock:
    """The records F, F + 1, ... (``count`` of them, at most ``block``) of the data file ``path`` (``token``
    its :func:`token`), each named on its own (feature lists: their parse errors do not say the record's
    place in the batch)."""

    path: tf.Tensor  # scalar string
    token: tf.Tensor  # scalar string
    first: tf.Tensor  # scalar int64
    count: tf.Tensor  # scalar int
    block: int

    def vector(self) -> tf.Tensor:
        """'@xxxxxxx:F+j' for j < count: one join against constant offsets (no number formatted per record),
        short enough for TensorFlow to hold each in place."""
        offsets = tf.constant([str(j) for j in range(self.block)])
        prefix = tf.strings.join([self.token, ":", tf.strings.as_string(self.first), "+"])
        return tf.strings.join([prefix, offsets[:self.count]])

    def at(self, j: tf.Tensor) -> tf.Tensor:
        """'path: record N' of the j-th record (what a check's message names)."""
        return tf.strings.join(record_name_parts(self.path, self.first + tf.cast(j, tf.int64)))


_NAMED = (BlockNames, RecordNames, EachInBlock)


def vector(names):
    """What a parse op's ``example_names`` takes: a [B] string tensor (or None)."""
    return names.vector() if isinstance(names, _NAMED) else names


def at(names, j: tf.Tensor) -> tf.Tensor:
    """The name of the j-th record; j may be one past the last (a check that found nothing builds its
    message anyway): that gives an empty name (a slice and a join: no copy of the names)."""
    return names.at(j) if isinstance(names, _NAMED) else tf.strings.reduce_join(names[j:j + 1])
