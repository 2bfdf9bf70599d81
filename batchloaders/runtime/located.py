"""Data errors of a running pipeline as DataError, located and said in the manifest's words.

TensorFlow's parse ops name the record they fail on only sometimes (Example
records in a block: the block and an index; a SequenceExample's feature list:
nothing at all), and say what they found in their own terms. A :class:`Locator`
knows one config's files and manifest: given a file and record it reads that
record again and says what disagrees (``read.records.check_record``); given
nothing, it reads the files in order for the first record that disagrees.

The datasets ``build_input_fn`` returns convert errors themselves when iterated
eagerly (``next()``, ``for``, ``as_numpy_iterator``). Keras ``fit`` pulls the
batches inside a ``tf.function``, where no Python of ours runs: the error comes
out of the model's method. So the model given to ``build_input_fn(config,
model=model)`` gets its own ``fit``, ``evaluate`` and ``predict`` wrapped
(:func:`locate_model_errors`; its class and other models are left alone);
elsewhere ``batchloaders.data_errors()`` converts them. Both use the locators of
the pipelines built in this process.
"""
from __future__ import annotations

import functools
import json
import os
import re
import threading
import time
from typing import NamedTuple

import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops, iterator_ops

from batchloaders import errors
from batchloaders.read import naming
from batchloaders.runtime import translate
from batchloaders.core.model import LoaderConfig
from batchloaders.read.proven import reads_proven
from batchloaders.read.records import ReadError, check_record, read_records
from batchloaders.runtime.resume import mismatch
from batchloaders.transform.steps import decode_image


# TensorFlow's reader on damaged data, as read_records words it: "corrupted record at B", "truncated record at B",
# or (a record cut short) "the data ends inside the record that starts at byte B".
_LOST = re.compile(r"(?:corrupted record at|truncated record at|the record that starts at byte) (?P<at>\d+)")


class Damage(NamedTuple):
    """Where TensorFlow's reader fails in a file: ``record`` begins at byte ``offset``; ``exact``: at the byte the
    error being placed names."""

    path: str
    record: int
    offset: int
    exact: bool


class Locator:
    """Finds and explains the records of one config's data files that disagree with its manifest."""

    def __init__(self, config: LoaderConfig):
        self.source = config.source
        self.files = tuple(config.dataset.files)
        self.manifest = config.dataset.manifest
        self.read_as: dict[str, tuple[str, ...]] = {}
        for primary in config.primary_features:
            self.read_as[primary.from_name] = self.read_as.get(primary.from_name, ()) + (primary.to_name,)
        self.images = decode_image.decoded_features(config)  # stored name -> its decode_image steps
        # Its pipelines read without the accounting that names a damaged file (read/proven.py): TensorFlow's
        # reader errors, which name none, are theirs to place (translate._frame).
        self.proven = reads_proven(config)

    def changed_size(self) -> tuple[str, int, int | None] | None:
        """(path, size the manifest lists, size now, None when it cannot be measured) of the first data file
        whose size is not the listed one; None when every file is its listed size (or sizes are not listed)."""
        for path in self.files:
            entry = self.manifest.entry(path)
            if entry is None or entry.size_bytes is None:
                continue
            try:
                now = os.stat(path).st_size
            except OSError:
                return path, entry.size_bytes, None
            if now != entry.size_bytes:
                return path, entry.size_bytes, now
        return None

    def knows(self, path: str) -> bool:
        return path in self.files

    def explain(self, path: str, record: int) -> str | None:
        """What record ``record`` of ``path`` has wrong, read again; None if it cannot be read or agrees."""
        try:
            records = tf.data.TFRecordDataset(path, compression_type=self.manifest.tf_compression)
            serialized = next(iter(records.skip(record).take(1)), None)
        except (tf.errors.OpError, OSError):
            return None
        if serialized is None:
            return None
        return self._problems(serialized.numpy())

    def find(self, feature: str | None = None, seconds: float = translate.SEARCH_SECONDS, images: bool = False
             ) -> tuple[str, int, str] | None:
        """(file, record, problem) of the first record that disagrees, reading the files in order; None
        when none does or the search runs out of time. ``feature``: the stored name an error named;
        ``images``: the first record whose image a decode_image step cannot decode, instead."""
        read_as = ({feature: self.read_as[feature]} if feature in self.read_as else None)
        deadline = time.monotonic() + seconds
        for path in self.files:
            try:
                for index, _, serialized in read_records(path, self.manifest.compression):
                    problem = (decode_image.record_problems(serialized, self.images) if images
                               else self._problems(serialized, read_as))
                    if problem:
                        return path, index, problem
                    if time.monotonic() > deadline:
                        return None
            except (ReadError, tf.errors.OpError, OSError):
                continue  # a damaged or vanished file: its own checks report it
        return None

    def damaged(self, at: int | None = None, seconds: float = translate.SEARCH_SECONDS) -> Damage | None:
        """Where TensorFlow's reader fails on a damaged frame or checksum, or a record cut short, reading the
        files in order.

        Args:
            at: the byte TensorFlow's error names ("corrupted record at B"): a file failing there is the one
                (another file may be damaged too, or belong to another input pipeline's share).
            seconds: how long the search may read, in all (checked at every record).

        Returns:
            The file failing at ``at``; else the first file found failing elsewhere (``exact`` False); None
            when no file fails so (a file that cannot be opened or read is its own checks' to report) or the
            search runs out of time first.
        """
        deadline = time.monotonic() + seconds
        first = None
        for path in self.files:
            try:
                for _ in read_records(path, self.manifest.compression):
                    if time.monotonic() > deadline:
                        return first
            except ReadError as error:
                said = _LOST.search(error.message)
                if said is None:
                    continue  # not the data's damage (it cannot be opened, or read): not this error
                found = Damage(path, error.index, error.offset, int(said.group("at")) == at)
                if found.exact:
                    return found
                first = first or found
            except (tf.errors.OpError, OSError):
                continue
        return first

    def _problems(self, serialized: bytes, read_as=None) -> str | None:
        found = check_record(serialized, self.manifest, read_as or self.read_as, named=True)
        return "; ".join(found) if found else None


def register(locator: Locator) -> None:
    translate.LOCATORS.append(locator)




_KINDS: dict[type, type] = {}
_KINDS_LOCK = threading.Lock()


def also_as(converted: errors.DataError, original: BaseException) -> errors.DataError:
    """``converted``, also an instance of the TensorFlow error it stands for (a DataError that is an
    InvalidArgumentError, say), so that code catching TensorFlow's error type keeps working."""
    base = type(original)
    if not isinstance(original, tf.errors.OpError):
        return converted
    with _KINDS_LOCK:
        if base not in _KINDS:
            _KINDS[base] = type(f"Data{base.__name__}", (errors.DataError, base), {
                "__module__": __name__, "__doc__": f"A DataError raised where TensorFlow raised {base.__name__}.",
                # pickled (to another process) as the plain DataError it is: the class is made here, at run time
                "__reduce__": lambda self: (errors.DataError, (self.problems,))})
    error = _KINDS[base].__new__(_KINDS[base])
    errors.DataError.__init__(error, converted.problems)
    # What tf.errors.OpError's properties read: the located text is the message.
    error._node_def, error._op, error._message = original.node_def, None, str(converted)
    error._error_code, error._experimental_payloads = original.error_code, {}
    return error


def _names_our_file(error: BaseException) -> bool:
    """Whether ``error``'s message names a data file of a pipeline built in this process, or an op of our
    decode_image step: only those are ours to convert (another pipeline's parse error, e.g. the user's own
    validation data, stays TensorFlow's)."""
    message = getattr(error, "message", None)
    if isinstance(error, UnicodeDecodeError) and isinstance(error.object, bytes):
        message = error.object.decode("utf-8", "replace")
    if not isinstance(message, str):
        return False
    locators = list(translate.LOCATORS)
    return decode_image.SCOPE in message or any(
        naming.mentions(message, path) for locator in locators for path in locator.files) or (
        # A size probe's failure names no file (read/proven.py): ours when one of our files changed size.
        translate.is_count_error(message) and any(locator.proven and locator.changed_size() for locator in locators))


def _converted(error: BaseException) -> BaseException | None:
    """The located DataError (also of ``error``'s TensorFlow class) a data error of our pipelines stands for;
    None for any other."""
    if isinstance(error, (errors.BatchLoaderError, tf.errors.OutOfRangeError)) or not isinstance(
            error, (tf.errors.OpError, UnicodeDecodeError)) or not _names_our_file(error):
        return None
    converted = translate.data_error_from(error)  # every pipeline's locators: validation data may be another's
    return None if converted is None else also_as(converted, error)


_MODEL_METHODS = ("fit", "evaluate", "predict")
_LOCATING = "_batchloaders_locating"


def _locating(original, *, wraps: bool = True):
    """``original`` (a model's bound method, or the step function Keras made), its data errors raised as
    located DataErrors."""
    def method(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except Exception as error:
            converted = _converted(error)
            if converted is None:
                raise
            raise converted from error
    if wraps:
        method = functools.wraps(original)(method)
    setattr(method, _LOCATING, True)
    return method


# Keras makes the function each step of fit/evaluate/predict calls, and keeps it on the model under this name.
_STEP_FUNCTIONS = {"make_train_function": "train_function", "make_test_function": "test_function",
                   "make_predict_function": "predict_function"}


def _making(model, original, attribute: str):
    """``original`` (a model's make_*_function), the step function it keeps on the model wrapped by _locating:
    ``model.fit(build_input_fn(config, model=model)())`` looks ``fit`` up before the wrapping, and still reaches
    the step function made inside it."""
    def make(*args, **kwargs):
        made = original(*args, **kwargs)
        current = getattr(model, attribute, None)
        if current is None or getattr(current, _LOCATING, False):
            return made
        wrapped = _locating(current, wraps=False)
        object.__setattr__(model, attribute, wrapped)  # past Keras's attribute tracking
        return wrapped if made is current else made
    setattr(make, _LOCATING, True)
    return make


def locate_model_errors(model) -> None:
    """Make ``model``'s own ``fit``, ``evaluate`` and ``predict`` raise the data errors of the pipelines built in
    this process as located DataErrors (each also an instance of the TensorFlow error it stands for).

    Only this instance changes: each method is wrapped where the instance finds it (its class's, or one the
    user set on the instance). A saved, cloned or copied model (Keras copies through its saving) comes
    without the wrappers.

    Args:
        model: a Keras model (as checked by keras_align.describe_model).
    """
    for name in _MODEL_METHODS:
        found = getattr(model, name, None)
        if not callable(found) or getattr(found, _LOCATING, False):
            continue
        object.__setattr__(model, name, _locating(found))  # past Keras's attribute tracking
    for maker, attribute in _STEP_FUNCTIONS.items():
        found = getattr(model, maker, None)
        if callable(found) and not getattr(found, _LOCATING, False):
            object.__setattr__(model, maker, _making(model, found, attribute))


# The key beside tf.data's own "_STATE" under which a checkpoint of our iterator keeps the pipeline's identity.
IDENTITY = "_BATCHLOADERS_IDENTITY"


class _LocatingIterator(iterator_ops.OwnedIterator):
    """An eager iterator whose data errors come out as DataError (inside a tf.function it is a plain one), and
    whose checkpoints (``tf.train.Checkpoint(iterator=it)``) keep the pipeline's identity: a restore into a
    pipeline that would give other batches is a ResumeError naming what differs, not a silent carry-on."""

    def __init__(self, dataset, locators: tuple[Locator, ...], identity: str | None, fetch=None):
        self._locators, self._identity, self._fetch = locators, identity, fetch
        super().__init__(dataset)

    def _serialize_to_tensors(self):
        out = super()._serialize_to_tensors()
        if self._identity is not None:
            out[IDENTITY] = tf.constant(self._identity)
        return out

    def _restore_from_tensors(self, restored_tensors):
        if self._identity is not None and IDENTITY in restored_tensors:
            saved = json.loads(restored_tensors[IDENTITY].numpy().decode())
            found = mismatch(saved, json.loads(self._identity))
            if found:
                raise errors.ResumeError([errors.Problem("<checkpoint>", "$.iterator", p) for p in found])
        return super()._restore_from_tensors({"_STATE": restored_tensors["_STATE"]})

    def _copy_trackable_to_cpu(self, object_map):
        # An asynchronous checkpoint saves a copy: a copy of this kind, so that it keeps the identity too.
        if self not in object_map:
            object_map[self] = _LocatingIterator(self._dataset, self._locators, self._identity)
        object_map[self]._restore_from_tensors(self._serialize_to_tensors())

    def _next_internal(self):
        if not tf.executing_eagerly():
            return super()._next_internal()
        try:
            return self._fetch(self) if self._fetch is not None else super()._next_internal()
        except tf.errors.OutOfRangeError:
            raise
        except (tf.errors.OpError, UnicodeDecodeError) as error:
            converted = translate.data_error_from(error, self._locators)
            if converted is None:
                raise
            raise also_as(converted, error) from error


class LocatedDataset(dataset_ops.UnaryUnchangedStructureDataset):
    """``dataset`` as it is, whose eager iterators raise located DataErrors (found by ``locators``: one per
    source of its data) and check restored checkpoints against ``identity`` (resume.identity as JSON);
    ``fetcher``: makes, for each eager iterator, what fetches its next element in place of tf.data's plain
    get_next (service.BoundedWait)."""

    def __init__(self, dataset: tf.data.Dataset, locators: tuple[Locator, ...], identity: str | None = None,
                 fetcher=None):
        self._locators, self._identity, self._fetcher = locators, identity, fetcher
        super().__init__(dataset, dataset._variant_tensor)  # noqa: SLF001 - the same pipeline, not a new one

    def __iter__(self):
        if tf.executing_eagerly() and not tf.inside_function():
            return _LocatingIterator(self, self._locators, self._identity, self._fetcher and self._fetcher())
        return super().__iter__()
