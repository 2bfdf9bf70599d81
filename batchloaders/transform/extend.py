"""Adding processing steps and secondary feature types: the public decorators.

A plugin is a module of pure functions on tensors, each registered under a name
with the JSON Schema of its ``args``; a config then names it by ``type``::

    import batchloaders

    @batchloaders.register_step("scale", schema={
        "type": "object", "required": ["factor"], "additionalProperties": False,
        "properties": {"factor": {"type": "number"}}})
    def scale(x, factor):
        return x * factor          # x: one example's tensor, without the batch axis

The built-in types register through these same decorators. By default a function
sees one example at a time (``x`` as the example has it: a variable-length first
axis is cut to the example's own length) and the compiler runs it over each batch
with ``tf.map_fn``. ``batched=True`` functions see the whole padded batch instead
(faster; the built-ins are written that way):

* step: ``fn(args, values [B, ...], lengths [B] or None, info_in, info_out) -> (values, lengths)``
* secondary: ``fn(args, batch, info) -> (values, lengths)``; ``batch.values`` and
  ``batch.lengths`` hold the tensors built so far.

Without an ``infer`` function the output's dtype and shape come from tracing the
function once on a ``tf.TensorSpec`` of its input when the config is checked
(which imports TensorFlow). Functions must be TensorFlow ops only: one that
returns a Python object, or calls ``tf.py_function``/``tf.numpy_function``, is
refused with a ConfigError naming the step when the config is checked or the
pipeline is built.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
from typing import Any, Callable

from batchloaders.errors import BatchLoaderError, ConfigError, Problem
from batchloaders.transform.registry import (ALL_LOADERS, BATCHERS, BUILTIN, GLOBAL, POLICIES, SECONDARY, STEPS, BatcherType,
                                   CheckContext, DuplicateName, SecondaryType, StepType)
from batchloaders.core.model import DTYPES, TensorInfo, format_shape
from batchloaders.transform.per_example import map_examples

__all__ = ["register_step", "register_secondary", "register_batcher", "PluginError", "BuildError", "ContractError"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})
_scope = GLOBAL  # where registrations go now (see registry.BUILTIN and plugins.py)


@contextlib.contextmanager
def registering(scope):
    """Registrations made inside belong to ``scope`` (the built-in packages, or one plugin file)."""
    global _scope
    before, _scope = _scope, scope
    try:
        yield
    finally:
        _scope = before


class PluginError(BatchLoaderError):
    """A type cannot be registered (bad name or schema, a name taken), or a plugin cannot be imported."""


class BuildError(Exception):
    """A registered function cannot make its part of the pipeline (a file it reads changed since the
    config was checked, ...). Turned into a ConfigError naming the config item by :func:`checked`."""


class ContractError(Exception):
    """A registered function broke its contract while traced (Python result, Python op). Turned into a
    ConfigError naming the config item by :func:`checked`."""

    # AutoGraph would re-raise it with its own traceback (frames of this module) prepended to the message.
    ag_pass_through = True


def _where(fn: Callable) -> tuple[str, int | None]:
    """(file, line) of a registered function, for messages."""
    try:
        file, line = inspect.getsourcefile(fn) or "<unknown>", inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        file, line = getattr(getattr(fn, "__code__", None), "co_filename", "<unknown>"), None
    return file, line


def _origin(fn: Callable) -> str:
    """Where a registered function is, as messages name it: "plugins/p.py: function bad_step, line 7" (the
    file relative to the working directory when inside it: a plugin file's module has a private name)."""
    file, line = _where(fn)
    if os.path.isabs(file) and not os.path.relpath(file).startswith(".."):
        file = os.path.relpath(file)
    name = getattr(fn, "__qualname__", None) or _label(fn)
    return f"{file}: function {name}" + (f", line {line}" if line else "")


def named(word: str, name: str, item) -> str:
    """How a message names a registered type: "step 'x'", and for a plugin's also where its function is
    ("step 'x' (plugins/p.py: function f, line 3)"), so that the user knows whose code to fix."""
    return _named(word, name, item.origin, item.scope)


def _named(word: str, name: str, origin: str, scope) -> str:
    return f"{word} {name!r}" if scope == BUILTIN or not origin else f"{word} {name!r} ({origin})"


def _refuse(fn: Callable, call: str, message: str):
    file, line = _where(fn)
    raise PluginError(Problem(file, call, message, line))


def _checked_schema(fn: Callable, call: str, schema: Any) -> dict:
    import jsonschema

    if schema is None:
        schema = {"type": "object", "additionalProperties": False, "properties": {}}
    if not isinstance(schema, dict):
        _refuse(fn, call, f"found a schema of type {type(schema).__name__}: expected a dict, the JSON Schema "
                          "of the args object")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as error:
        where = "/".join(str(p) for p in error.absolute_path) or "top level"
        _refuse(fn, call, f"the schema is not a valid JSON Schema (draft 2020-12) at {where}: {error.message}")
    if schema.get("type") != "object":
        _refuse(fn, call, f"found a schema of type {schema.get('type')!r}: expected \"type\": \"object\" "
                          "(it describes the args object of a config item)")
    return schema


def _as_traced(fn: Callable) -> Callable:
    """A plugin's ``fn`` as ``tf.function`` and ``Dataset.map`` trace it: through AutoGraph, so that Python
    ``if``/``for`` on tensors work in the pipeline as they did when the config was checked (``_trace``).
    The built-ins are written without it and run as written (graphs.py): converting costs time at
    every first build in a process. Converted at the first call, once; a function AutoGraph cannot
    convert (no source) runs as written, as ``tf.function`` would run it. A ``functools.partial``, a
    method or a callable object is converted through the function it calls (``to_graph`` takes plain
    functions only)."""
    if _scope == BUILTIN:
        return fn
    converted = []

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if not converted:
            try:
                converted.append(_autograph(fn))
            except Exception:  # (AutoGraph's ConversionError and what inspecting the source raises)
                converted.append(fn)
        return converted[0](*args, **kwargs)
    call.__name__ = _label(fn)  # (wraps leaves "call" when fn has no name: a partial, a callable object)
    return call


def _label(fn: Callable) -> str:
    """The name messages give a registered function: a partial or a callable object may have no ``__name__``."""
    name = getattr(fn, "__name__", None)
    if name is None and isinstance(fn, functools.partial):
        return _label(fn.func)
    return name or type(fn).__name__


def _autograph(fn: Callable) -> Callable:
    import tensorflow as tf

    if isinstance(fn, tf.types.experimental.PolymorphicFunction):
        return fn  # a tf.function converts itself
    if isinstance(fn, functools.partial):
        return functools.partial(_autograph(fn.func), *fn.args, **fn.keywords)
    if inspect.ismethod(fn):
        return functools.partial(tf.autograph.to_graph(fn.__func__), fn.__self__)
    if inspect.isfunction(fn):
        return tf.autograph.to_graph(fn)
    method = getattr(fn, "__call__", None)  # a callable object: through its bound __call__
    return _autograph(method) if inspect.ismethod(method) else fn


def _start(fn: Callable, call: str, name: Any, loaders) -> str:
    if not callable(fn):
        _refuse(fn, call, f"found {type(fn).__name__}: expected a function to register")
    if not isinstance(name, str) or not _NAME.match(name):
        _refuse(fn, call, f"found the name {name!r}: expected letters, digits, '_', '.' or '-', starting "
                          "with a letter or '_'")
    bad = [kind for kind in loaders if kind not in ALL_LOADERS]
    if bad or not loaders:
        _refuse(fn, call, f"found loaders {list(loaders)!r}: expected a non-empty list of {', '.join(ALL_LOADERS)}")
    return _origin(fn)


def _served(loaders):
    """The loaders a type serves: every one, the ones registered later too, for ``ALL_LOADERS``."""
    return loaders if loaders is ALL_LOADERS else tuple(loaders)


def _register(registry, item, fn: Callable, call: str):
    try:
        registry.register(item)
    except DuplicateName as error:
        _refuse(fn, call, str(error))


def register_step(name: str, *, schema: dict | None = None, infer: Callable | None = None, batched: bool = False,
                  loaders=ALL_LOADERS) -> Callable:
    """Register ``fn`` as the processing step ``name`` (a decorator; returns ``fn`` unchanged).

    Per example (the default), ``fn(x, **args)`` gets one example's tensor (no batch axis; a
    variable-length first axis cut to the example's own length) and returns one tensor. With
    ``batched``, ``fn(args, values [B, ...], lengths [B] or None, info_in, info_out) -> (values, lengths)``.

    Example:
        >>> @batchloaders.register_step("scale", schema={
        ...     "type": "object", "required": ["factor"], "additionalProperties": False,
        ...     "properties": {"factor": {"type": "number"}}})
        ... def scale(x, factor):
        ...     return x * factor

    Args:
        name: the ``type`` a config's step names it by: letters, digits, ``_``, ``.`` or ``-``, starting with a
            letter or ``_``.
        schema: the JSON Schema (draft 2020-12, ``"type": "object"``) of the step's ``args``. None: no args.
        infer: ``infer(args, info, ctx) -> TensorInfo | None`` gives the output's dtype and shape from the
            input's without TensorFlow, reporting problems with ``ctx.report`` (a :class:`CheckContext`).
            None: ``fn`` is traced once on a ``tf.TensorSpec`` of its input when the config is checked.
        batched: ``fn`` takes the whole padded batch (faster; the built-ins are written that way).
        loaders: the loader types whose configs may use it.

    Returns:
        The decorator, which registers ``fn`` and returns it.

    Raises:
        PluginError: (when the decorator is applied) ``fn`` is not callable; ``name`` is not a valid name, or
            is taken; ``schema`` is not a JSON Schema of an object; ``loaders`` is empty or names an unknown
            loader type.
    """
    def decorate(fn):
        call = f"register_step({name!r})"
        origin = _start(fn, call, name, loaders)
        checked_schema = _checked_schema(fn, call, schema)
        what = _named("step", name, origin, _scope)
        build = _as_traced(fn) if batched else _per_example_step(_as_traced(fn), what)
        _register(STEPS, StepType(name, checked_schema, infer or _traced_step(fn, batched, what), build,
                                  _served(loaders), origin, _scope), fn, call)
        return fn
    return decorate


def register_secondary(name: str, *, schema: dict | None = None, infer: Callable | None = None, batched: bool = False,
                       loaders=ALL_LOADERS, measures: str | None = None, after_chunking: bool = False) -> Callable:
    """Register ``fn`` as the secondary feature type ``name`` (a decorator; returns ``fn`` unchanged).

    Per example (the default), ``fn(features, **args)`` gets a dict of the example's primary
    features and earlier secondary features and returns one tensor. With ``batched``,
    ``fn(args, batch, info) -> (values, lengths)``; ``batch.values`` and ``batch.lengths`` hold the tensors
    built so far.

    Args:
        name: the ``type`` a config's secondary feature names it by, as for :func:`register_step`.
        schema: the JSON Schema (draft 2020-12, ``"type": "object"``) of its ``args``. None: no args.
        infer: ``infer(args, ctx) -> TensorInfo | None`` gives the output's dtype and shape without
            TensorFlow, reporting problems with ``ctx.report`` (a :class:`CheckContext`). None: ``fn`` is
            traced once when the config is checked.
        batched: ``fn`` takes the whole padded batch.
        loaders: the loader types whose configs may use it.
        measures: the arg holding a tensor this type measures after that tensor's processing steps (as
            ``length`` does); such a feature is built once those steps have run.
        after_chunking: (with ``batched``) the feature is built from each chunk's metadata once the examples
            are cut into chunks (``batch.extras["chunk"]``: ``index``, ``count`` and ``source_key``, one per
            chunk), and only configs with a ``chunking`` block may use it.

    Returns:
        The decorator, which registers ``fn`` and returns it.

    Raises:
        PluginError: (when the decorator is applied) as for :func:`register_step`, and ``after_chunking``
            without ``batched``.
    """
    def decorate(fn):
        call = f"register_secondary({name!r})"
        origin = _start(fn, call, name, loaders)
        if after_chunking and not batched:
            _refuse(fn, call, "found after_chunking without batched: a feature built on chunks reads their metadata "
                              "from the batch (batch.extras['chunk']); expected batched=True")
        checked_schema = _checked_schema(fn, call, schema)
        what = _named("secondary feature", name, origin, _scope)
        build = _as_traced(fn) if batched else _per_example_secondary(_as_traced(fn), what)
        _register(SECONDARY, SecondaryType(name, checked_schema, infer or _traced_secondary(fn, batched, what), build,
                                           _served(loaders), origin, measures, _scope, after_chunking), fn, call)
        return fn
    return decorate


def register_batcher(name: str, *, schema: dict | None = None) -> Callable:
    """Register ``fn`` as the batching policy ``name`` (a decorator; returns ``fn`` unchanged).

    ``fn(examples, **args)`` turns one batch of a tensor into what the model receives:
    ``examples`` is a ``tf.RaggedTensor`` [B, (length), ...] when the tensor's first axis varies
    in length, else a dense ``tf.Tensor`` [B, ...]; it returns a ``tf.Tensor``,
    ``tf.RaggedTensor`` or ``tf.SparseTensor`` made of TensorFlow ops. A padding list entry
    names it with ``batching: name`` and its args with ``batching_args``.

    Args:
        name: the name ``batching:`` gives, as for :func:`register_step`; not a built-in policy's.
        schema: the JSON Schema (draft 2020-12, ``"type": "object"``) of ``batching_args``. None: no args.

    Returns:
        The decorator, which registers ``fn`` and returns it.

    Raises:
        PluginError: (when the decorator is applied) as for :func:`register_step`, and the name of a built-in
            policy.
    """
    def decorate(fn):
        call = f"register_batcher({name!r})"
        origin = _start(fn, call, name, ALL_LOADERS)
        if name in POLICIES:
            _refuse(fn, call, f"found the name {name!r}: it is a built-in batching policy ({', '.join(POLICIES)}); "
                              "expected another name")
        checked_schema = _checked_schema(fn, call, schema)
        _register(BATCHERS, BatcherType(name, checked_schema, _as_traced(fn), origin, _scope), fn, call)
        return fn
    return decorate


def batched_output(value, what: str):
    """A batcher's result, if it is a TensorFlow value a model can take."""
    import tensorflow as tf

    if not isinstance(value, (tf.Tensor, tf.RaggedTensor, tf.SparseTensor)):
        raise ContractError(f"{what} returned {type(value).__name__} {_short(value)}: expected a tf.Tensor, "
                            "tf.RaggedTensor or tf.SparseTensor made of TensorFlow ops")
    return value


# ------------------------------------------------------------------ tracing and contracts

def _tensor_result(value, what: str):
    import tensorflow as tf

    if not isinstance(value, tf.Tensor):
        raise ContractError(f"{what} returned {type(value).__name__} {_short(value)}: expected a tf.Tensor "
                            "made of TensorFlow ops (no Python or NumPy values)")
    return value


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _python_ops(graph_def) -> list[str]:
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    return sorted({n.op for n in nodes if n.op in PYTHON_OPS})


def _check_graph(graph, what: str) -> None:
    """Refuse Python callbacks anywhere in ``graph``, nested functions included."""
    found = _python_ops(graph.as_graph_def())
    if found:
        raise ContractError(f"{what} calls back into Python ({', '.join(found)}, from tf.py_function or "
                            "tf.numpy_function): expected TensorFlow ops only, so that the pipeline runs without "
                            "the Python interpreter")


@contextlib.contextmanager
def checked(source: str, json_path: str, what: str, builtin: bool):
    """Turn a registered function's failure while the pipeline is traced into a ConfigError naming the item."""
    import tensorflow as tf

    try:
        yield
        if not builtin:  # ours are checked by tests; a plugin's graph is scanned once, at trace time
            _check_graph(tf.compat.v1.get_default_graph(), what)
    except BatchLoaderError:
        raise
    except (ContractError, BuildError) as error:
        raise ConfigError(Problem(source, json_path, str(error))) from None
    except Exception as error:  # a plugin's own bug or a shape it cannot take: say which item
        if builtin:
            raise
        raise ConfigError(Problem(source, json_path, f"{what} failed while the pipeline was built: "
                                                     f"{type(error).__name__}: {error}")) from None


def called(kind, word: str, source: str, json_path: str, build: Callable[[], Any], promised=None):
    """A registered type's function called for the config item at ``json_path`` of ``source``, checked: every
    secondary feature, processing step and batcher the pipeline builds goes through here.

    Args:
        kind: the registered SecondaryType, StepType or BatcherType.
        word: what messages call it: "secondary feature", "step" or "batcher".
        source: the config file.
        json_path: the item's place in it.
        build: calls ``kind``'s function with the item's arguments and tensors.
        promised: the TensorInfo of the batch (values, lengths) the type promised; None for a batcher, whose
            result is one TensorFlow value.

    Returns:
        What ``build()`` returned.

    Raises:
        ConfigError: naming the item, for a result other than the one promised, or a plugin's failure while the
            pipeline is traced (:func:`checked`).
    """
    what = named(word, kind.name, kind)
    with checked(source, json_path, what, kind.scope == BUILTIN):
        result = build()
        if promised is None:
            return batched_output(result, what)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise ContractError(f"{what} (batched) returned {_described(result)}: expected a pair "
                                "(values, lengths or None)")
        check_batch(*result, promised, what)
    return result


def _described(result) -> str:
    """What a batched function returned, as a message says it: its type, and a tuple's length."""
    return f"a tuple of {len(result)}" if isinstance(result, tuple) else type(result).__name__


def _info_of(tensor, what: str, ctx: CheckContext):
    """TensorInfo of a traced per-example result, or report why it cannot be a pipeline tensor."""
    dtype = tensor.dtype.name
    if dtype not in DTYPES:
        ctx.report(("type",), f"{what} returns dtype {dtype}: expected one of {', '.join(DTYPES)}")
        return None
    if tensor.shape.rank is None:
        ctx.report(("type",), f"{what} returns a tensor of unknown rank: expected a known rank (use "
                              "tf.ensure_shape or give an infer function)")
        return None
    shape = tuple(tensor.shape.as_list())
    unknown = [axis for axis, dim in enumerate(shape) if dim is None and axis > 0]
    if unknown:
        ctx.report(("type",), f"{what} returns shape {format_shape(shape)} with an unknown size on axis {unknown[0]}: "
                              "expected fixed sizes on every axis but the first (use tf.ensure_shape or give an "
                              "infer function)")
        return None
    return TensorInfo(dtype, shape)


def _trace(function, specs, what: str, ctx: CheckContext):
    """Trace ``function`` on ``specs``; the concrete function's outputs, or None after a report."""
    import tensorflow as tf

    try:
        concrete = tf.function(function).get_concrete_function(*specs)
        _check_graph(concrete.graph, what)
    except ContractError as error:
        ctx.report(("type",), str(error))
        return None
    except BatchLoaderError:
        raise
    except Exception as error:
        ctx.report(("type",), f"{what} failed when traced on its input: {_cause(error)}")
        return None
    return concrete.structured_outputs


def _cause(error: Exception) -> str:
    """'Type: first line' of what a traced function raised, without the traceback AutoGraph puts first."""
    meta = getattr(error, "ag_error_metadata", None)
    text = (getattr(meta, "cause_message", None) or f"{type(error).__name__}: {error}").strip()
    return text.splitlines()[0] if text else type(error).__name__


def _spec(info):
    import tensorflow as tf

    return tf.TensorSpec(info.shape, tf.as_dtype(info.dtype))


def _traced_step(fn: Callable, batched: bool, what: str) -> Callable:
    def infer(args: dict, info, ctx: CheckContext):
        import tensorflow as tf

        if batched:
            has_lengths = info.shape[:1] == (None,)
            gives_lengths = []  # whether the function returns lengths: a Python fact, kept out of the trace

            def run(values, *rest):
                out = fn(args, values, rest[0] if rest else None, info, None)
                if not (isinstance(out, tuple) and len(out) == 2):
                    raise ContractError(f"{what} (batched) returned {type(out).__name__}: expected a pair "
                                        "(values, lengths or None)")
                gives_lengths.append(out[1] is not None)
                return _tensor_result(out[0], what)
            specs = [tf.TensorSpec((None,) + info.shape, tf.as_dtype(info.dtype))]
            specs += [tf.TensorSpec([None], tf.int64)] if has_lengths else []
            values = _trace(run, specs, what, ctx)
            if values is None:
                return None
            first = [None] if gives_lengths[-1] else values.shape[1:2]
            shape = tf.TensorShape(first).concatenate(values.shape[2:])
            return _info_of(tf.TensorSpec(shape, values.dtype), what, ctx)
        out = _trace(lambda x: _tensor_result(fn(x, **args), what), [_spec(info)], what, ctx)
        return None if out is None else _info_of(out, what, ctx)
    return infer


def _traced_secondary(fn: Callable, batched: bool, what: str) -> Callable:
    def infer(args: dict, ctx: CheckContext):
        if batched:
            ctx.report(("type",), f"{what} is batched and has no infer function: expected infer= in "
                                  "register_secondary (a batched secondary sees the whole batch)")
            return None
        names = list(ctx.tensors)
        specs = [{n: _spec(ctx.tensors[n]) for n in names}]
        out = _trace(lambda features: _tensor_result(fn(features, **args), what), specs, what, ctx)
        return None if out is None else _info_of(out, what, ctx)
    return infer


def _signature(info):
    """map_fn's output signature for one example's result: ragged when the first axis varies."""
    import tensorflow as tf

    dtype = tf.as_dtype(info.dtype)
    if info.shape[:1] == (None,):
        return tf.RaggedTensorSpec(info.shape, dtype, ragged_rank=0)
    return tf.TensorSpec(info.shape, dtype)


def _examples(values, lengths):
    """A batch as map_fn elements: ragged (each example cut to its length) when lengths are given."""
    import tensorflow as tf

    if lengths is None:
        return values
    return tf.RaggedTensor.from_tensor(values, lengths=tf.cast(lengths, tf.int64))


def _as_batch(result):
    """map_fn's result as (values [B, ...] zero-padded, lengths [B] or None)."""
    import tensorflow as tf

    if isinstance(result, tf.RaggedTensor):
        return result.to_tensor(), result.row_lengths()
    return result, None


def _as_promised(value, info, what: str):
    """One example's result, checked against the TensorInfo its type promised (statically where the
    trace knows the sizes, at run time where it does not: a bad size then names the function)."""
    import tensorflow as tf

    value = _tensor_result(value, what)
    if value.dtype.name != info.dtype or not value.shape.is_compatible_with(info.shape):
        raise ContractError(f"{what} returned {value.dtype.name} {format_shape(value.shape.as_list() if value.shape.rank is not None else ['...'])}"
                            f" for one example: expected {info.dtype} {format_shape(info.shape)} (what its infer "
                            "function says)")
    checks = [tf.debugging.assert_equal(tf.shape(value)[axis], dim, message=f"{what} returned an example whose "
                                        f"axis {axis} is not {dim} long (its infer function says {format_shape(info.shape)})")
              for axis, dim in enumerate(info.shape) if dim is not None and value.shape[axis] is None]
    with tf.control_dependencies(checks):
        return tf.identity(value) if checks else value


def _per_example_step(fn: Callable, what: str) -> Callable:
    def build(args, values, lengths, info_in, info_out):
        import tensorflow as tf

        result = map_examples(lambda x: _as_promised(fn(x, **args), info_out, what), _examples(values, lengths),
                              _signature(info_out))
        return _as_batch(result)
    return build


def check_batch(values, lengths, info, what: str) -> None:
    """A batch a registered function made, against the TensorInfo its type promised when checked."""
    values = _tensor_result(values, what)
    if lengths is not None:
        _tensor_result(lengths, what + " (lengths)")
    expected = (None,) + tuple(info.shape)
    if values.dtype.name != info.dtype or not values.shape.is_compatible_with(expected):
        shape = format_shape(values.shape.as_list()) if values.shape.rank is not None else "of unknown rank"
        raise ContractError(f"{what} made a batch {values.dtype.name} {shape}: expected {info.dtype} "
                            f"{format_shape(expected)} (the batch axis, then what its infer function says)")
    if info.shape[:1] == (None,) and lengths is None:
        raise ContractError(f"{what} made a batch whose first example axis varies in length "
                            f"({format_shape(info.shape)}) without its lengths: expected (values, lengths)")


def _per_example_secondary(fn: Callable, what: str) -> Callable:
    def build(args, batch, info):
        import tensorflow as tf

        elems = {n: _examples(v, batch.lengths.get(n)) for n, v in batch.values.items()}
        result = map_examples(lambda features: _as_promised(fn(features, **args), info, what), elems,
                              _signature(info))
        return _as_batch(result)
    return build
