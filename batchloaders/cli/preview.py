"""``batchloaders preview CONFIG [-n N]``: the first batches a config gives, as a model gets them.

The batches are those of ``build_input_fn(CONFIG)()`` (same shuffle, same seed),
the first ``N`` of them. For each batch and each output tensor it prints the
role (input or target), the dtype, the shape and the first example's first
values; then each padded tensor's padding fraction over those batches::

    $ batchloaders preview padded.yaml -n 2
    config: padded.yaml
    loader: independent, batch size 4, shuffle false, seed null, epochs null
    batch 1 (4 examples):
      input tokens: int64 [4, 4]; first example [4]: [10, 0, 0, 0]
      target label: int64 [4]; first example []: [1]
    batch 2 (4 examples):
      input tokens: int64 [4, 8]; first example [8]: [50, 51, 52, 53, 54, 0, 0, 0]
      target label: int64 [4]; first example []: [5]
    padding fraction (padded elements / all elements over the first 2 batches, the real elements from the
    loader's lengths before padding):
      tokens: 0.2500 (12 / 48)
      label: 0 (not padded: fixed shape)

Padding is not guessed from values equal to the pad value: the real elements
come from the lengths the loader knows before it pads (``bench.lengths_dataset``
and its bucketing and chunking variants, the same measure bench reports), in a
second pass over the first ``N`` batches. That pass gives the very batches shown
when the order is fixed (no shuffle, or a seed, and ``sloppy_interleave`` false);
otherwise the output says that it measured other batches of the same
distribution. With packing, a packed tensor's padding is where ``segment_ids``
is 0 in the rows shown; with segmenting, a segmented tensor's padding is every
step of a row past its ``length`` counter (a padding segment's length is 0), in
the rows shown.

Every wait for a batch is bounded (``timeout`` seconds): a dataset that spins
without yielding (``epochs: null`` over data that gives no batch) raises
:class:`NoBatchInTime` instead of hanging; the iterating thread is a daemon, and
the command line ends the process with ``os._exit``.

``plot``: a PNG of the first varying tensor's real lengths per example and padded
width per batch (with segmenting: each row's length counter and num_unroll), and
of the padding fraction per batch (needs matplotlib: the ``plot`` extra).
"""
from __future__ import annotations

import dataclasses
import queue
import re
import sys
import threading
from typing import Any, Callable, Iterator, TextIO

import numpy as np
import tensorflow as tf

from batchloaders.cli import bench
from batchloaders.errors import BatchLoaderError, DataError, Problem
from batchloaders.runtime.translate import ASSERTION as _ASSERTION, data_error_from
from batchloaders.transform.batching import Batch
from batchloaders.transform.graphs import as_written
from batchloaders.config.config import load_config
from batchloaders.core.model import LoaderConfig
from batchloaders.read import sharding
from batchloaders.read.integrity import Reader
from batchloaders.loaders import base, registry as loaders
from batchloaders.regroup import stage as stages
from batchloaders.regroup.stage import ShownPadding
from batchloaders.input_fn import build_input_fn

DEFAULT_BATCHES = 3
DEFAULT_TIMEOUT = 60.0
SHOWN_VALUES = 8  # values of the first example printed per tensor
PRECISION = 4
SECOND_PASS = "the real elements from the loader's lengths before padding"  # what the second pass measures
PLOT_MISSING = 'preview --plot needs matplotlib: pip install "batchloaders[plot]"'
# What preview reports instead of a traceback: config problems and failures while reading data.
FAILURES = (BatchLoaderError, tf.errors.OpError)


class NoBatchError(DataError):
    """The dataset gave no batch, or none within the time allowed."""


class NoBatchInTime(NoBatchError):
    """No batch within the time allowed: the thread waiting for it may still be stuck in TensorFlow."""


class PlotUnavailable(Exception):
    """--plot without matplotlib installed."""


@dataclasses.dataclass
class Tensor:
    """One output tensor of one batch, as numpy: ``kind`` dense, ragged or sparse."""

    name: str
    role: str  # input or target
    kind: str
    dtype: str
    shape: str
    first: np.ndarray  # the first example's values
    first_shape: tuple


def within(timeout: float, call: Callable[[], Any], what: str, source: str) -> Any:
    """``call()`` in a daemon thread; its result, its exception, or NoBatchError after ``timeout`` s."""
    done: queue.Queue = queue.Queue(maxsize=1)

    def work():
        try:
            done.put((True, call()))
        except BaseException as error:  # handed to the caller, raised there
            done.put((False, error))

    threading.Thread(target=work, name="batchloaders-preview", daemon=True).start()
    try:
        ok, value = done.get(timeout=timeout)
    except queue.Empty:
        raise NoBatchInTime(Problem(source, "$.args", (
            f"no batch within {timeout:g} s: {what} (the dataset may be endless and yield nothing, e.g. epochs "
            "null over data that gives no batch; raise --timeout if the data is only slow)"))) from None
    if not ok:
        raise value
    return value


def take(dataset: tf.data.Dataset, batches: int, timeout: float, source: str) -> list:
    """The first ``batches`` elements of ``dataset`` (fewer if it ends), each waited for at most ``timeout`` s."""
    iterator: Iterator = within(timeout, lambda: iter(dataset), "building the iterator", source)
    out = []
    end = object()
    for i in range(batches):
        try:
            element = within(timeout, lambda: next(iterator, end), f"waiting for batch {i + 1}", source)
        except (tf.errors.OpError, UnicodeDecodeError) as error:
            raise located(error, source) from error
        if element is end:
            break
        out.append(element)
    return out


_ENDLESS_EMPTY = "expected to contain an infinite number of elements but contained only 0"
_LOCATED = re.compile(r"^(?P<file>[^\n]+?): (?P<path>\$[^ ]*): (?P<text>.+)$", re.S)


def located(error: Exception, source: str) -> Exception:
    """The BatchLoaderError a TensorFlow error of the running pipeline stands for, else ``error`` itself.

    Data errors as :func:`batchloaders.data_error_from` reads them; the checks a
    loader runs while reading (e.g. the sequence loaders' "a full pass gave no
    window") as the located message they carry; an endless repeat over nothing
    as NoBatchError.
    """
    converted = data_error_from(error)
    if converted is not None:
        return converted
    message = getattr(error, "message", "")
    if _ENDLESS_EMPTY in message:
        return NoBatchError(Problem(source, "$.args.epochs", (
            "the dataset yielded no batch: epochs is null (repeat forever) but a whole pass over the data gave "
            "no element")))
    found = _ASSERTION.search(message)
    check = _LOCATED.match(found.group("text").replace("\\'", "'")) if found else None
    if check:
        return DataError(Problem(check.group("file"), check.group("path"), check.group("text").strip()))
    return error


def split(config: LoaderConfig, element) -> list[tuple[str, str, Any]]:
    """(role, name, tensor) of every output tensor of one element: (inputs, targets) or inputs alone."""
    parts = element if isinstance(element, tuple) and len(element) == 2 else (element,)
    out = []
    counters = set(stages.of(config).carried(config))
    for role, names, part in zip(("input", "target"), (config.inputs, config.targets), parts):
        if isinstance(part, dict):  # a segment counter the model does not name: as describe labels it
            out.extend((f"{role} (counter)" if name in counters else role, name, tensor) for name, tensor in part.items())
        elif isinstance(part, (tuple, list)):
            out.extend((role, name, tensor) for name, tensor in zip(names, part))
        else:
            out.append((role, names[0] if names else role, part))
    return out


def describe_tensor(role: str, name: str, tensor) -> Tensor:
    """Shape, dtype and first example of a dense, ragged or sparse batch tensor."""
    dtype = tensor.dtype.name
    if isinstance(tensor, tf.RaggedTensor):
        lengths = tensor.row_lengths().numpy()
        inner = [str(d) for d in tensor.shape[2:]]
        span = f"({lengths.min()}..{lengths.max()})" if len(lengths) else "(0)"
        shape = f"[{', '.join([str(tensor.shape[0]), span] + inner)}] ragged"
        first = tensor[0].numpy() if len(lengths) else np.zeros([0])
        return Tensor(name, role, "ragged", dtype, shape, first, first.shape)
    if isinstance(tensor, tf.SparseTensor):
        indices, values = tensor.indices.numpy(), tensor.values.numpy()
        dense_shape = tensor.dense_shape.numpy().tolist()
        first = values[indices[:, 0] == 0] if len(indices) else values
        shape = f"[{', '.join(map(str, dense_shape))}] sparse, {len(values)} entries"
        return Tensor(name, role, "sparse", dtype, shape, first, (len(first),))
    array = tensor.numpy()
    first = array[0] if array.ndim else array
    return Tensor(name, role, "dense", dtype, f"[{', '.join(map(str, array.shape))}]", np.asarray(first),
                  np.shape(first))


def examples_in(tensor) -> int:
    """The batch size of a dense, ragged or sparse batch tensor."""
    if isinstance(tensor, tf.RaggedTensor):
        return int(tensor.nrows())
    if isinstance(tensor, tf.SparseTensor):
        return int(tensor.dense_shape[0])
    return int(tf.shape(tensor)[0])


def format_values(values: np.ndarray, shown: int = SHOWN_VALUES) -> str:
    """'[v, v, ..., (+k more)]' of the first ``shown`` values, flattened; strings decoded, floats rounded."""
    flat = np.asarray(values).reshape(-1)

    def one(v) -> str:
        if isinstance(v, bytes):
            return repr(v.decode("utf-8", errors="backslashreplace"))
        if isinstance(v, (float, np.floating)):
            return np.format_float_positional(v, precision=PRECISION, trim="-")
        return str(v.item() if hasattr(v, "item") else v)

    parts = [one(v) for v in flat[:shown]]
    if flat.size > shown:
        parts.append(f"... (+{flat.size - shown} more)")
    return f"[{', '.join(parts)}]"


def tensor_line(t: Tensor) -> str:
    what = "first example's entries" if t.kind == "sparse" else "first example"
    dims = ", ".join(map(str, t.first_shape))
    return f"  {t.role} {t.name}: {t.dtype} {t.shape}; {what} [{dims}]: {format_values(t.first)}"


def measured(config: LoaderConfig) -> list[str]:
    """The output tensors whose padding preview measures: bench's padded tensors; with packing, the packed ones;
    with segmenting, the segmented ones."""
    measured = stages.of(config).padded(config)
    if measured is not None:
        return measured
    return bench.padded_tensors(config)


def padding_dataset(config: LoaderConfig) -> tf.data.Dataset:
    """Real and padded elements per padded tensor of the loader's batches, in their order.

    The measuring datasets are bench's (real elements from the lengths before
    padding), or the stage's own (bucketing's, chunking's). Not for a stage that measures the rows shown
    (packing, segmenting: its ``shown_padding``).
    """
    size = config.target_batch_size
    dataset = stages.of(config).padding_dataset(config, size, bench.padded_tensors(config))
    if dataset is None:  # the loader's batches are the model's
        dataset = bench.lengths_dataset(config, size)
    return dataset.map(as_written(lambda e: {"real": e["real"], "padded": e["padded"]}))


def by_name(config: LoaderConfig, raw: list) -> list[dict]:
    """Each batch's output tensors by name."""
    return [{name: tensor for _, name, tensor in split(config, element)} for element in raw]


def padding_lines(config: LoaderConfig, counts: list[dict] | None, batches: int, own: ShownPadding | None = None
                  ) -> list[str]:
    """One line per output tensor: its padding fraction over the batches ``counts`` measured; ``own``: what the
    stage measured on the batches shown, None when a second pass measured them."""
    names = measured(config)
    if names and counts is None:
        return [own.unmeasured]
    how = "" if not names else ", " + (own.how if own is not None else SECOND_PASS)
    lines = [f"padding fraction (padded elements / all elements over the first {batches} batches{how}):"]
    second_pass = names and own is None
    if second_pass and config.shuffling.shuffle and config.seed is None:
        lines.append("  (shuffle with seed null: measured on a second pass, other batches of the same distribution)")
    elif second_pass and config.reading.sloppy_interleave:
        lines.append("  (sloppy_interleave: measured on a second pass whose order may differ)")
    for name in config.outputs:
        if name in names:
            real = sum(c["real"][name] for c in counts)
            padded = sum(c["padded"][name] for c in counts)
            fraction = (padded - real) / padded if padded else 0.0
            lines.append(f"  {name}: {fraction:.4f} ({padded - real} / {padded})")
        else:
            spec = config.pad_specs.get(name)
            batching = spec.batching if spec is not None and spec.batching != "padded" else None
            lines.append(f"  {name}: 0 (not padded: {batching + ' batching' if batching else 'fixed shape'})")
    return lines


def example_lengths(config: LoaderConfig, name: str, batches: int) -> list[np.ndarray] | None:
    """Each example's real length of ``name`` per batch, from a second pass over the loader's batches; None
    where those are not the model's (bucketing, packing, chunking, segmenting) or not the batches shown (shuffle
    with seed null, sloppy_interleave)."""
    if config.regroup is not None:
        return None
    if (config.shuffling.shuffle and config.seed is None) or config.reading.sloppy_interleave:
        return None
    loader = loaders.of(config)

    def lengths(element):
        batch = Batch(dict(element["values"]), dict(element["lengths"]), dict(element.get("extras", {})))
        return base.transform(batch, config).lengths[name]

    dataset = loader.batches(config, sharding.plan(config, None), config.target_batch_size, Reader(config)).map(as_written(lengths))
    return list(dataset.take(batches).as_numpy_iterator())


def _lengths_and_width(config: LoaderConfig, name: str, tensors: list) -> tuple[list, list[int]] | None:
    """Per batch: each example's real length of ``name`` (first axis) and the batch's width along it."""
    first = tensors[0]
    if isinstance(first, tf.RaggedTensor):
        lengths = [t.row_lengths().numpy() for t in tensors]
        return lengths, [int(ls.max()) if len(ls) else 0 for ls in lengths]
    if isinstance(first, tf.SparseTensor):  # every entry of every example is stored, zeros included
        shapes = [t.dense_shape.numpy() for t in tensors]
        lengths = [np.bincount(t.indices.numpy()[:, 0], minlength=int(s[0])) // max(1, int(np.prod(s[2:])))
                   for t, s in zip(tensors, shapes)]
        return lengths, [int(s[1]) for s in shapes]
    lengths = example_lengths(config, name, len(tensors))
    if lengths is None:
        return None
    return lengths, [int(t.shape[1]) for t in tensors]


def draw(path: str, config: LoaderConfig, raw: list, counts: list[dict] | None) -> str:
    """Draw lengths and padding per batch into ``path`` (PNG); return a line saying what was drawn."""
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable(PLOT_MISSING) from None
    matplotlib.use("Agg")
    from matplotlib import pyplot

    shown = by_name(config, raw)
    own = stages.of(config).drawn_lengths(config, shown)
    if own is not None:
        name, drawn = own
    else:
        varying = [name for name in config.outputs if config.tensors[name].shape[:1] == (None,)]
        name = varying[0] if varying else None
        drawn = _lengths_and_width(config, name, [t[name] for t in shown]) if name is not None else None
    figure, (top, bottom) = pyplot.subplots(2, 1, figsize=(8, 6), sharex=True)
    xs = np.arange(1, len(raw) + 1)
    if drawn is not None:
        lengths, widths = drawn
        for x, ls in zip(xs, lengths):
            top.scatter(x + np.linspace(-0.3, 0.3, len(ls)), ls, s=8, color="tab:blue")
        top.hlines(widths, xs - 0.4, xs + 0.4, color="tab:red", label="batch width (padded to)")
        top.legend()
        top.set_ylabel(f"{name}: length per example")
    else:
        top.text(0.5, 0.5, "no per-example lengths to show", ha="center", va="center", transform=top.transAxes)
    names = measured(config)
    if counts and names:  # all padded tensors together
        fractions = [1 - sum(c["real"][n] for n in names) / max(1, sum(c["padded"][n] for n in names))
                     for c in counts]
        bottom.bar(np.arange(1, len(counts) + 1), fractions, color="tab:gray")
    else:
        bottom.text(0.5, 0.5, "no padding measured (no padded tensor, or packing without segment_ids)", ha="center",
                    va="center", transform=bottom.transAxes)
    bottom.set_xticks(xs)
    bottom.set_ylim(0, 1)
    bottom.set_ylabel("padding fraction")
    bottom.set_xlabel("batch")
    figure.suptitle(f"{config.source}: first {len(raw)} batches")
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    what = f"{name}: length per example and batch width" if drawn is not None else "no per-example lengths"
    return f"plot: {path} ({what}; padding fraction per batch)"


def run(path: str, batches: int = DEFAULT_BATCHES, out: TextIO | None = None, plot: str | None = None,
        timeout: float = DEFAULT_TIMEOUT, trust_plugins: bool = True) -> int:
    """Print the first ``batches`` batches of the config at ``path``; return the exit status (0).
    ``trust_plugins``: as :func:`batchloaders.load_config` takes it.

    Raises BatchLoaderError (NoBatchError when the dataset gives no batch, or
    none within ``timeout`` seconds), tf.errors.OpError for data failures, and
    PlotUnavailable when ``plot`` (a PNG file to draw) is given without matplotlib.
    """
    out = out or sys.stdout
    config = load_config(path, trust_plugins=trust_plugins)
    dataset = build_input_fn(config)()
    raw = take(dataset, batches, timeout, config.source)
    if not raw:
        raise NoBatchError(Problem(config.source, "$.args", (
            f"the dataset yielded no batch (epochs {config.epochs}, batch size {config.target_batch_size}, "
            f"drop_remainder {str(config.drop_remainder).lower()})")))
    shown = [[describe_tensor(role, name, t) for role, name, t in split(config, e)] for e in raw]
    seed = "null" if config.seed is None else config.seed
    print(f"config: {config.source}", file=out)
    print(f"loader: {config.type}, batch size {config.target_batch_size}, "
          f"shuffle {str(config.shuffling.shuffle).lower()}, seed {seed}, "
          f"epochs {'null' if config.epochs is None else config.epochs}", file=out)
    for i, tensors in enumerate(shown):
        print(f"batch {i + 1} ({examples_in(split(config, raw[i])[0][2])} examples):", file=out)
        for t in tensors:
            print(tensor_line(t), file=out)
    if len(raw) < batches:
        print(f"the dataset ended after {len(raw)} batch{'es' * (len(raw) != 1)}", file=out)
    counts = None
    own = stages.of(config).shown_padding(config, by_name(config, raw))
    if own is not None:
        counts = own.counts
    elif measured(config):  # a second pass, each batch waited for as the first
        counts = [tf.nest.map_structure(int, c)
                  for c in take(padding_dataset(config), len(raw), timeout, config.source)]
    for line in padding_lines(config, counts, len(raw), own):
        print(line, file=out)
    if plot is not None:
        print(draw(plot, config, raw, counts), file=out)
    return 0
