"""``NumpyIterator``: an ``input_fn``'s batches as NumPy arrays (or JAX arrays), for training loops outside
TensorFlow, with a plain JSON-serializable state and each process of a multi-process run reading its share.

* **Batches**: the structure ``input_fn()`` gives Keras ((features, targets) dicts, or what ``model=`` packs),
  each tensor a ``numpy.ndarray``; with ``device_put`` (a JAX sharding or device), ``jax.device_put`` of it.
* **Prefetch**: with ``prefetch`` > 0 (the default with ``device_put``), a thread makes the next ``prefetch``
  batches (NumPy conversion and ``device_put`` included) while the caller's step runs; tf.data's own prefetch
  goes on underneath, and NumPy batches alone (``prefetch`` 0, their default) are taken from it directly: a
  thread's hand-over cost more than it saved (benchmarks/numpy_iterator.py).
* **State**: a :class:`~batchloaders.runtime.resume.ResumableIterator` in replay mode underneath; the state
  is the one after the last batch *given*, not after the ones prefetched, so a restore goes on exactly there.
  Under a global shuffle it is the position of the run's order, which fits another ``target_batch_size``.
* **Processes**: ``process_index`` of ``process_count`` is the ``tf.distribute.InputContext`` the pipeline is
  built for: each process reads its share of the data (read/sharding.py) and makes batches of
  ``target_batch_size / process_count`` examples, its part of the global batch.
"""
from __future__ import annotations

import sys
import threading
import warnings
import weakref
from typing import Any, Mapping

import numpy as np
import tensorflow as tf

from batchloaders.errors import ConfigError, Problem
from batchloaders.runtime.resume import ResumableIterator

_WHERE = "<numpy_iterator>"


def hide_gpus() -> None:
    """Keep TensorFlow off the GPUs, which JAX or PyTorch use: the pipeline runs on the CPU whatever trains.
    TensorFlow fixes its devices when its runtime starts (a tensor made, Keras on TensorFlow imported);
    after that only a warning can say that it holds GPUs."""
    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:  # the runtime started with its GPUs visible: they cannot be hidden any more
        visible = tf.config.get_visible_devices("GPU")
        if visible:
            warnings.warn(
                f"TensorFlow started before numpy_iterator with {len(visible)} GPU(s) visible "
                f"({', '.join(d.name for d in visible)}); it may reserve their memory next to JAX or PyTorch. "
                "Call batchloaders.numpy_iterator (or tf.config.set_visible_devices([], 'GPU')) before anything "
                "else uses TensorFlow", RuntimeWarning, stacklevel=3)


def processes(process_index, process_count) -> tuple[int, int]:
    """(index, count) as given, or JAX's when neither is given, JAX is imported and runs several processes;
    else (0, 1). ConfigError for one given without the other or values that do not make a share."""
    if process_index is None and process_count is None:
        jax = sys.modules.get("jax")  # imported by the program: never imported here
        if jax is not None and jax.process_count() > 1:
            return jax.process_index(), jax.process_count()
        return 0, 1
    if process_index is None or process_count is None:
        missing = "process_index" if process_index is None else "process_count"
        raise ConfigError(Problem(_WHERE, f"$.{missing}", (
            f"missing while {'process_count' if process_index is None else 'process_index'} is given: expected "
            "both (this process's index and the number of processes) or neither (JAX's, or one process)")))
    for name, value, low in (("process_count", process_count, 1), ("process_index", process_index, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(Problem(_WHERE, f"$.{name}", f"found {value!r}: expected an integer >= {low}"))
    if process_index >= process_count:
        raise ConfigError(Problem(_WHERE, "$.process_index", (
            f"found {process_index} with process_count {process_count}: expected 0 to {process_count - 1}")))
    return process_index, process_count


def _named_specs(spec, path=()):
    """(path, spec) of every component of an element_spec: dict keys and tuple positions as the path."""
    if isinstance(spec, Mapping):
        for key, value in spec.items():
            yield from _named_specs(value, path + (str(key),))
    elif isinstance(spec, (tuple, list)):
        for i, value in enumerate(spec):
            yield from _named_specs(value, path + (str(i),))
    else:
        yield path, spec


_KINDS = ((tf.RaggedTensorSpec, "ragged", "a tf.RaggedTensor"), (tf.SparseTensorSpec, "sparse", "a tf.SparseTensor"))


def check_outputs(element_spec, config) -> None:
    """ConfigError naming each tensor that comes out ragged or sparse: NumPy, JAX and PyTorch take dense arrays."""
    problems = []
    for path, spec in _named_specs(element_spec):
        found = next(((policy, what) for kind, policy, what in _KINDS if isinstance(spec, kind)), None)
        if found is None:
            continue
        # A dict key is the tensor's name; a bare tensor or tuple position (model= packing) is named by its path.
        name = path[-1] if path and not path[-1].isdigit() else "/".join(path) or "the batch"
        pad = config.pad_specs.get(name)
        problems.append(Problem(config.source, pad.json_path if pad is not None else "$.args.padding", (
            f"tensor {name!r} comes out {found[0]} ({found[1]}), which numpy_iterator cannot give as one array "
            "(nor JAX or PyTorch take it); expected batching: padded (the default) for it: a fixed `shape` keeps "
            f"one batch shape, and a secondary feature {{to_name: {name}_length, type: length, args: "
            f"{{tensor: {name}}}}} gives the model each example's length; or input_fn() with Keras on TensorFlow")))
    if problems:
        raise ConfigError(problems)


def _placer(device_put):
    """The function each batch goes through: NumPy arrays, then jax.device_put when a placement is given."""
    def to_numpy(batch):
        # np.asarray shares the tensor's memory, as as_numpy_iterator does; Tensor.numpy() copies it.
        return tf.nest.map_structure(np.asarray, batch)

    if device_put is None:
        return to_numpy
    try:
        import jax  # optional: only a placement needs it
    except ImportError:
        raise ConfigError(Problem(_WHERE, "$.device_put", (
            f"found {device_put!r}, but jax is not installed: expected jax (pip install 'jax[cpu]'), or "
            "device_put=None for NumPy batches"))) from None
    return lambda batch: jax.device_put(to_numpy(batch), device_put)


def _state_after(batches: ResumableIterator, start: Mapping[str, Any], made: int) -> dict[str, Any]:
    """The state after ``made`` batches given from ``start`` (the count, and a global shuffle's position up to the
    run's end); a ResumeError when a count would pass what a checkpoint holds."""
    consumed, position = batches.advanced(start["batches_consumed"], start.get("position"), made)
    return dict(start, batches_consumed=consumed, **({} if position is None else {"position": position}))


class _Ahead:
    """The prefetching thread: makes batches into ``ready`` while fewer than ``depth`` wait there."""

    def __init__(self, batches: ResumableIterator, convert, depth: int):
        self.ready: list = []  # (kind, value, state after it), oldest first
        self.changed = threading.Condition()
        self.stopping = False
        self._batches, self._convert, self._depth = batches, convert, depth
        self.made = 0  # batches taken from the pipeline, reported to ResumableIterator when the thread stops
        self.thread = threading.Thread(target=self._run, name="batchloaders-numpy-iterator", daemon=True)
        self.thread.start()

    def _run(self):
        # Only this thread moves the pipeline until it stops: it takes the batches from the pipeline's own
        # iterator and counts the state after each here (ResumableIterator's next reads and writes its variables,
        # about 0.3 ms a batch); stop() reports the count. A global shuffle's position grows by the pipelines' batch.
        start = self._batches.get_state()
        try:
            raw = self._batches.raw_batches()
        except BaseException as error:  # (a ResumeError of the state set): raised where the batch is taken
            with self.changed:
                self.ready.append(("error", error, None))
                self.changed.notify_all()
            return
        while True:
            with self.changed:
                self.changed.wait_for(lambda: self.stopping or len(self.ready) < self._depth)
                if self.stopping:
                    return
            try:
                batch = next(raw)
                state = _state_after(self._batches, start, self.made + 1)
                self.made += 1
                item = ("batch", self._convert(batch), state)
            except StopIteration:
                item = ("end", None, None)
            except BaseException as error:  # a DataError of the data, raised again where the batch is taken
                item = ("error", error, None)
            with self.changed:
                self.ready.append(item)
                self.changed.notify_all()
            if item[0] != "batch":
                return

    def take(self):
        with self.changed:
            self.changed.wait_for(lambda: self.ready)
            item = self.ready.pop(0)
            self.changed.notify_all()
            return item

    def signal(self):
        """Tell the thread to stop after the batch it is making, if any (and return at once)."""
        with self.changed:
            self.stopping = True
            self.changed.notify_all()

    def stop(self):
        self.signal()
        self.thread.join()  # (after the batch it is making, if any: the iterator is then free again)
        if self.made and not sys.is_finalizing():  # (at exit nothing reads the position any more)
            self._batches.count_given(self.made)
        self.made = 0


class _Direct:
    """As :class:`_Ahead` without a thread (``prefetch`` 0): each batch is taken from the pipeline's own iterator
    when asked for (tf.data's prefetch has it ready), the state counted here."""

    def __init__(self, batches: ResumableIterator, convert, depth: int = 0):
        del depth
        self._batches, self._convert = batches, convert
        self._start = batches.get_state()
        self._raw = batches.raw_batches()
        self.made = 0

    def take(self):
        try:
            batch = next(self._raw)
            state = _state_after(self._batches, self._start, self.made + 1)
        except StopIteration:
            return "end", None, None
        except BaseException as error:  # a DataError of the data: the state stays after the last batch given
            return "error", error, None
        self.made += 1
        return "batch", self._convert(batch), state

    def signal(self):
        pass

    def stop(self):
        if self.made and not sys.is_finalizing():
            self._batches.count_given(self.made)
        self.made = 0


def _stop(holder: dict) -> None:
    ahead = holder.pop("ahead", None)
    if ahead is not None:
        ahead.stop()


def _collected(holder: dict) -> None:
    """The iterator was collected: its thread is told to stop, and nothing more. Collection runs wherever the
    garbage collector does, on any thread, also while TensorFlow traces a function and holds its graph's lock:
    a TensorFlow op here (reporting the batches made) went into that graph or waited on that lock for ever, and
    joining the thread could wait on the same lock. Nothing reads the position of a collected iterator."""
    ahead = holder.pop("ahead", None)
    if ahead is not None:
        ahead.signal()


class NumpyIterator:
    """Iterates ``input_fn``'s batches as NumPy (or JAX) arrays; see the module docstring and
    :func:`batchloaders.numpy_iterator`, which makes one from a config.

    Underneath, a ResumableIterator in replay mode. Used as a context manager, it is closed on leaving.

    Args:
        input_fn: what :func:`batchloaders.build_input_fn` returned.
        process_index: this process's number, from 0; given with ``process_count``. Default: JAX's (0 with one
            process).
        process_count: the processes reading the data, each its share. Default: JAX's process count, else 1.
        device_put: a JAX sharding or device: each batch is ``jax.device_put`` onto it. None: NumPy arrays.
        prefetch: the batches made ahead in a thread. Default: 1 with ``device_put``, else 0.

    Raises:
        ConfigError: ``prefetch`` is not an integer >= 0; ``process_index`` and ``process_count`` do not make a
            share; ``device_put`` without JAX installed; a tensor comes out ragged or sparse.
    """

    def __init__(self, input_fn, *, process_index: int | None = None, process_count: int | None = None,
                 device_put=None, prefetch: int | None = None):
        if prefetch is None:  # a transfer to a device overlaps the step; NumPy batches are ready in tf.data's prefetch
            prefetch = 0 if device_put is None else 1
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ConfigError(Problem(_WHERE, "$.prefetch", f"found {prefetch!r}: expected an integer >= 0 (the "
                                                            "batches made ahead; 0: none)"))
        self.process_index, self.process_count = processes(process_index, process_count)
        self.input_context = None if self.process_count == 1 else tf.distribute.InputContext(
            num_input_pipelines=self.process_count, input_pipeline_id=self.process_index,
            num_replicas_in_sync=self.process_count)
        self._batches = ResumableIterator(input_fn, self.input_context, mode="replay")
        self._state = self._batches.get_state()
        # The pipeline ResumableIterator starts with (the same call: input_fn keeps it, runtime/reuse.py).
        dataset = input_fn(self.input_context, params={"seed": self._state["seed"]}, skip_batches=0)
        check_outputs(dataset.element_spec, input_fn.config)
        self.element_spec = dataset.element_spec
        self._convert = _placer(device_put)
        self._prefetch = prefetch
        self._holder: dict = {}  # the prefetching thread, told to stop when this iterator is collected
        self._ended = False
        weakref.finalize(self, _collected, self._holder)

    def __iter__(self):
        return self

    def __next__(self):
        if self._ended:
            raise StopIteration
        if "ahead" not in self._holder:
            kind = _Ahead if self._prefetch else _Direct
            self._holder["ahead"] = kind(self._batches, self._convert, self._prefetch)
        kind, value, state = self._holder["ahead"].take()
        if kind == "end":
            self._ended = True
            raise StopIteration
        if kind == "error":
            self._halt()
            raise value
        self._state = state
        return value

    def get_state(self) -> dict[str, Any]:
        """The position after the last batch this iterator gave (not the batches made ahead).

        Returns:
            The small JSON-serializable dict ResumableIterator.get_state gives: seed, batches consumed, config
            hash (and under a global shuffle, the position of the run's order).
        """
        return dict(self._state)

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Go on from ``state`` at the next batch: the batches an uninterrupted run gives after it.

        Args:
            state: what :meth:`get_state` gave, here or in another process.

        Raises:
            ResumeError: ``state`` is not such a dict, or fits another config, batch size or process share.
        """
        _stop(self._holder)  # the batches made ahead belong to the old position
        self._batches.set_state(state)
        self._state = self._batches.get_state()
        self._ended = False

    def close(self) -> None:
        """Stop the prefetching thread (it stops on its own when the iterator is collected); a later
        ``next`` starts it again at the batch after the last one given."""
        self._halt()

    def _halt(self) -> None:
        """Stop the thread; the batches it made ahead are dropped, so the next start replays them."""
        _stop(self._holder)
        if self._batches.get_state() != self._state:
            self._batches.set_state(self._state)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
