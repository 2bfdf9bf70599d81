"""Keras alignment: a model's inputs and outputs against a checked config, before any batch is made.

Keras 3 reports a wrong or extra key late and misleadingly (an extra dict key is dropped with
only a warning; a missing one fails inside ``fit``), so ``build_input_fn(config, model=model)``
compares the two first and raises one ConfigError listing every mismatch:

>>> description = describe_model(model)          # what the model takes and gives
>>> problems(description, load_config("train.yaml"))  # [] when they agree

What is compared:

- **Names** of inputs and outputs, for functional models (dict keys, or ``keras.Input`` names):
  model tensors the config does not produce, config tensors the model does not take, and a
  pair of close names reported once as misnamed.
- **Positions** where the model's tensors have no names (Sequential models, functional models
  whose ``keras.Input`` got no ``name=``): the config's ``model`` block names them, in order, and
  must give as many inputs (targets) as the model takes (gives).
- For inputs only, **shape** (the config's per-example shape after padding against the model
  input's shape without its batch axis; an unknown length on either side matches anything),
  **dtype kind** (int, float, string, bool: Keras would silently cast an int tensor into a float
  input, which mostly hides a wrong tensor or a ``keras.Input`` left at its float32 default) and
  ragged/sparse against the tensor's ``batching``.
- Outputs against targets by name or count only: whether a target's shape and dtype suit an
  output depends on the loss (sparse labels [B] against logits [B, C]), which the model does not say.
- A built subclassed model exposes neither names nor shapes in Keras 3 beyond the dict it was built
  on: every key of that dict must be among the config's inputs (its ``call`` would fail on a missing
  key at the first batch), and the config's ``model`` block names the dicts its ``call`` receives.
  What its ``call`` returns (a tensor, a list or a dict) is found by running it on symbolic features
  shaped as the config's (:func:`with_outputs`), so that the targets come packed the same way and are
  compared with the outputs as a functional model's are.
- With segmenting, a model whose inputs are known gets the counters it names and no other
  (:func:`carried_counters`); a subclassed model gets them all. An unbuilt model (subclassed,
  or a Sequential without an ``Input``) is refused: it would be built on the first batch, whatever
  that batch holds.
"""
from __future__ import annotations

import dataclasses
import difflib
import re

from batchloaders.errors import ConfigError, Problem, suggest
from batchloaders.config.config import load_config
from batchloaders.core.model import LoaderConfig, format_shape
from batchloaders.regroup import stage as stages

MODEL = "<model>"
# The name Keras 3 gives a keras.Input created without name= (keras.src.utils.naming.auto_name).
_AUTO_NAME = re.compile(r"keras_tensor(_\d+)?")


@dataclasses.dataclass(frozen=True)
class Port:
    """One tensor a model takes or gives."""

    name: str | None  # None: unnamed, matched by position
    shape: tuple[int | None, ...]  # without the batch axis
    dtype: str
    ragged: bool = False
    sparse: bool = False


@dataclasses.dataclass(frozen=True)
class Side:
    """A model's inputs (or outputs) and how it takes them: a dict, a list or a single tensor."""

    ports: tuple[Port, ...]
    packing: str  # "dict", "list" or "single"

    @property
    def by_name(self) -> bool:
        return all(p.name is not None for p in self.ports)


@dataclasses.dataclass(frozen=True)
class ModelDescription:
    kind: str  # "functional", "sequential" or "subclassed"
    inputs: Side | None  # None: not known (a subclassed model)
    outputs: Side | None
    built_with: tuple[str, ...] = ()  # a subclassed model: the keys of the dict it was built on


def _attribute(model, name: str):
    """model.<name>, or None where Keras raises (an unbuilt model, a subclassed model's ``inputs``)."""
    try:
        return getattr(model, name)
    except (AttributeError, ValueError):
        return None


def _port(tensor, name: str | None) -> Port:
    shape = tuple(getattr(tensor, "shape", None) or ())
    return Port(name, shape[1:], str(getattr(tensor, "dtype", "") or ""), bool(getattr(tensor, "ragged", False)),
                bool(getattr(tensor, "sparse", False)))


def _side(structure, tensors, names) -> Side:
    """``structure``: model.input / model.output (None for a Sequential model); ``names``: of each tensor."""
    if isinstance(structure, dict):
        return Side(tuple(_port(t, n) for n, t in structure.items()), "dict")
    ports = tuple(_port(t, n) for t, n in zip(tensors, names))
    return Side(ports, "list" if isinstance(structure, (list, tuple)) or len(ports) > 1 else "single")


def describe_model(model) -> ModelDescription:
    """What ``model`` takes and gives; ConfigError for an unbuilt model or something that is not one."""
    import keras

    if not isinstance(model, keras.Model):
        raise ConfigError(Problem(MODEL, "$", f"found a {type(model).__name__}: expected a Keras model "
                                               "(functional, Sequential or a keras.Model subclass)"))
    kind = "sequential" if isinstance(model, keras.Sequential) else "functional"
    inputs = _attribute(model, "inputs")
    if not model.built or (kind == "sequential" and inputs is None):
        raise ConfigError(Problem(MODEL, "$", (
            f"the {type(model).__name__} model is not built, so its inputs are not known and Keras would build it "
            "from whatever the first batch holds: build it first (call it on one batch of features, or "
            "model.build(input_shape); a Sequential model can start with a keras.Input)")))
    if inputs is None:  # Keras 3 keeps no inputs of a subclassed model, even once it is built
        return ModelDescription("subclassed", None, None, _built_keys(model))
    outputs = _attribute(model, "outputs") or []
    structure_in = _attribute(model, "input") if kind == "functional" else None
    structure_out = _attribute(model, "output") if kind == "functional" else None
    in_names = [None if _AUTO_NAME.fullmatch(n) else n for n in (getattr(t, "name", "") or "" for t in inputs)]
    out_names = list(_attribute(model, "output_names") or []) if kind == "functional" else []
    out_names = (out_names + [None] * len(outputs))[:len(outputs)]
    return ModelDescription(kind, _side(structure_in, inputs, in_names), _side(structure_out, outputs, out_names))


def _built_keys(model) -> tuple[str, ...]:
    """The keys of the dict a subclassed model was built on (Keras records its shapes), or () when it was
    built on something else."""
    shapes = getattr(model, "_build_shapes_dict", None)
    if not isinstance(shapes, dict) or len(shapes) != 1:
        return ()
    built = next(iter(shapes.values()))
    return tuple(built) if isinstance(built, dict) and all(isinstance(k, str) for k in built) else ()


def _subclassed_problems(keys: tuple[str, ...], config: LoaderConfig) -> list[Problem]:
    """The keys a subclassed model was built on that the config's inputs lack."""
    # With segmenting, a subclassed model's features carry every segment counter too (carried_counters).
    given = set(config.inputs) | set(stages.of(config).counters(config))
    out = []
    for key in keys:
        if key in given:
            continue
        other = " (the config has it as a target)" if key in config.targets else ""
        out.append(Problem(config.source, "$.model.inputs", (
            f"the subclassed model was built on a dict with key {key!r}, which the config's inputs lack{other}"
            f"{suggest(key, [n for n in config.inputs if n not in keys])}: its call would fail on the first batch; "
            f"the config's inputs: {', '.join(config.inputs) or 'none'}")))
    return out


def model_names(description: ModelDescription) -> tuple[list[str], list[str]] | None:
    """(input names, output names) replacing the config's ``model`` block; None when the block must name them."""
    if description.inputs is None or not (description.inputs.by_name and description.outputs.by_name):
        return None
    return [p.name for p in description.inputs.ports], [p.name for p in description.outputs.ports]


def packing(description: ModelDescription, config: LoaderConfig) -> tuple[tuple[str, list[str]], tuple[str, list[str]]]:
    """((packing, names) of the features, (packing, names) of the targets), names in the model's order."""
    def one(side: Side | None, names: tuple[str, ...]) -> tuple[str, list[str]]:
        if side is None:
            return "dict", list(names)
        return side.packing, [p.name for p in side.ports] if side.by_name else list(names)
    return one(description.inputs, config.inputs), one(description.outputs, config.targets)


def carried_counters(description: ModelDescription | None, config: LoaderConfig) -> tuple[str, ...]:
    """The segment counters the features carry besides the model's inputs.

    All of them when nothing says which tensors the model takes (no model, or a subclassed model, whose
    ``call(features)`` takes what it uses); none for a functional or Sequential model: its inputs are known,
    the counters it names are among them, and Keras 3 would not drop an extra key quietly (a dict of
    features is flattened by position, feeding one tensor where another was expected, after a warning).
    """
    if description is not None and description.inputs is not None:
        return ()
    return stages.of(config).carried(config)


_KIND = {"bool": "bool", "string": "string"}


def dtype_kind(dtype: str) -> str:
    """'int', 'float', 'string' or 'bool' (what Keras would not convert silently between)."""
    dtype = str(dtype)
    if dtype in _KIND:
        return _KIND[dtype]
    if dtype.startswith(("int", "uint")):
        return "int"
    if dtype.startswith(("float", "bfloat", "half", "double")):
        return "float"
    return dtype


def batched_shape(config: LoaderConfig, name: str) -> tuple[int | None, ...]:
    """Per-example shape of output tensor ``name`` as batched (after padding); None: varies per batch."""
    info, spec = config.tensors[name], config.pad_specs.get(name)
    if not config.padding or spec is None or spec.batching != "padded" or spec.shape is None:
        return tuple(info.shape)
    return tuple(dim if want == -1 else want for want, dim in zip(spec.shape, info.shape))


def _batching(config: LoaderConfig, name: str) -> str:
    spec = config.pad_specs.get(name) if config.padding else None
    return spec.batching if spec is not None else ("padded" if config.padding else "dense")


def _where(config: LoaderConfig, name: str) -> str:
    """Where the config makes tensor ``name``."""
    for feature in (*config.primary_features, *config.secondary_features):
        if feature.to_name == name:
            return f"{feature.json_path}.to_name"
    return "$.model.inputs"


def _model_shape(shape) -> str:
    return "[" + ", ".join(str(d) for d in (None, *shape)) + "]"


def _input_problems(port: Port, name: str, label: str, config: LoaderConfig) -> list[str]:
    """What is wrong between config tensor ``name`` and model input ``port`` (``label`` names it)."""
    if name not in config.tensors:
        return []
    out = []
    info, batching = config.tensors[name], _batching(config, name)
    have, want = dtype_kind(info.dtype), dtype_kind(port.dtype)
    if have != want:
        counter = name in stages.of(config).counters(config)
        fix = "" if counter else f", or add a cast step to {name!r}"  # steps act on features, not on counters
        out.append(f"tensor {name!r} is {info.dtype} ({have}), but {label} takes {port.dtype} ({want}): expected "
                   f"the same kind of dtype (give the keras.Input dtype={info.dtype!r}{fix})")
    for flag, policy, what in ((port.ragged, "ragged", "a tf.RaggedTensor"),
                               (port.sparse, "sparse", "a tf.SparseTensor")):
        if flag and batching != policy:
            out.append(f"{label} is {policy} ({policy}=True), but the config batches {name!r} as {batching}: expected "
                       f"batching: {policy} in the padding entry of {name!r}")
        elif not flag and batching == policy:
            out.append(f"the config batches {name!r} as {what} (batching: {policy}), but {label} is not {policy}: "
                       f"expected keras.Input(..., {policy}=True)")
    if batching in ("padded", "dense", "ragged", "sparse"):  # a registered batcher's output is not known
        shape = batched_shape(config, name)
        if len(shape) != len(port.shape) or any(a is not None and b is not None and a != b
                                                for a, b in zip(shape, port.shape)):
            out.append(f"tensor {name!r} has shape {format_shape(('B',) + shape)} once batched, but {label} takes "
                       f"{_model_shape(port.shape)}: expected the same rank and the same length on every axis "
                       "both fix")
    return out


def _by_name(side: Side, names: tuple[str, ...], role: str, config: LoaderConfig) -> list[Problem]:
    path, noun = ("$.model.inputs", "input") if role == "input" else ("$.model.targets", "target")
    wanted = [p.name for p in side.ports]
    missing = [n for n in wanted if n not in names]
    extra = [n for n in names if n not in wanted]
    out = []
    for name in missing:
        close = difflib.get_close_matches(name, extra, n=1, cutoff=0.6)
        if close:  # one misnamed tensor, reported once
            extra.remove(close[0])
            out.append(Problem(config.source, path, (
                f"the model's {role} {name!r} is not produced by the config (did you mean the config's "
                f"{noun} {close[0]!r}?): rename one of them so that they match")))
        elif name in config.outputs:
            other = "a target" if role == "input" else "an input"
            out.append(Problem(config.source, path, (
                f"the model's {role} {name!r} is {other} in the config: expected it among the config's {noun}s "
                f"(model.{noun}s)")))
        else:
            out.append(Problem(config.source, path, (
                f"the model's {role} {name!r} is not produced by the config; the config's {noun}s: "
                f"{', '.join(names) or 'none'}")))
    for name in extra:
        if role == "input":
            why = ("is not taken by the model (Keras 3 would drop an extra dict key with only a warning); "
                   "the model takes")
        else:
            why = "has no output of the model to be compared with; the model gives"
        out.append(Problem(config.source, path, f"the config's {noun} {name!r} {why}: {', '.join(wanted)}"))
    if role == "input":
        for port in side.ports:
            if port.name in names:
                out.extend(Problem(config.source, _where(config, port.name), m)
                           for m in _input_problems(port, port.name, f"the model input {port.name!r}", config))
    return out


def _by_position(side: Side, names: tuple[str, ...], role: str, kind: str, config: LoaderConfig) -> list[Problem]:
    path, noun = ("$.model.inputs", "input") if role == "input" else ("$.model.targets", "target")
    if len(side.ports) != len(names):
        return [Problem(config.source, path, (
            f"the {kind} model's {role}s have no names, so they are matched by position with the config's "
            f"model.{noun}s: the model has {len(side.ports)} {role}(s), but the config names {len(names)} "
            f"({', '.join(names) or 'none'}): expected exactly {len(side.ports)}"))]
    out = []
    if role == "input":
        for i, (port, name) in enumerate(zip(side.ports, names)):
            out.extend(Problem(config.source, _where(config, name), m)
                       for m in _input_problems(port, name, f"the model's input {i}", config))
    return out


def problems(description: ModelDescription, config: LoaderConfig) -> list[Problem]:
    """Every mismatch between the model and the config; empty when they agree (or nothing can be compared)."""
    out = _subclassed_problems(description.built_with, config)
    for side, names, role in ((description.inputs, config.inputs, "input"),
                              (description.outputs, config.targets, "output")):
        if side is None:
            continue
        if side.by_name:
            out.extend(_by_name(side, names, role, config))
        else:
            out.extend(_by_position(side, names, role, description.kind, config))
    return out


def with_outputs(model, description: ModelDescription, config: LoaderConfig) -> ModelDescription:
    """``description`` with the outputs of a built subclassed model: what its ``call`` returns on symbolic
    features shaped as the config's (Keras's ``compute_output_spec``: no batch is read, no weight changes).

    Args:
        model: the Keras model ``description`` describes.
        description: from :func:`describe_model`.
        config: the checked config whose features the model will get.

    Returns:
        ``description`` itself for any other model or a config without targets; else with its outputs.

    Raises:
        ConfigError: the outputs do not match the config's targets (by name, or in number).
    """
    if description.kind != "subclassed" or description.outputs is not None or not config.targets:
        return description
    side = _returned(model, config)
    if side is None:
        if len(config.targets) != 1:
            return description  # the targets stay a dict keyed by their names
        # Keras takes one bare target against a single output, a one-key dict and a one-item list alike.
        side = Side((Port(None, (), ""),), "single")
    described = dataclasses.replace(description, outputs=side)
    found = problems(described, config)
    if found:
        raise ConfigError(found)
    return described


def _returned(model, config: LoaderConfig) -> Side | None:
    """The outputs ``model.call`` returns on the config's features, symbolically; None when it cannot run so."""
    import keras

    features = {}
    for name in (*config.inputs, *stages.of(config).carried(config)):
        info = config.tensors.get(name)
        if info is None:
            return None
        batching = _batching(config, name)
        features[name] = keras.KerasTensor((None, *batched_shape(config, name)), info.dtype,
                                           sparse=batching == "sparse", ragged=batching == "ragged")
    try:
        spec = model.compute_output_spec(features)
    except Exception:  # noqa: BLE001 - a call that only runs on real values: its outputs stay unknown
        return None
    if isinstance(spec, dict) and spec and all(isinstance(k, str) and _is_tensor(v) for k, v in spec.items()):
        return Side(tuple(_port(t, n) for n, t in spec.items()), "dict")
    if isinstance(spec, (list, tuple)) and spec and all(_is_tensor(t) for t in spec):
        # One target goes bare against a one-item list, as Keras takes it.
        return Side(tuple(_port(t, None) for t in spec), "list" if len(spec) > 1 else "single")
    return Side((_port(spec, None),), "single") if _is_tensor(spec) else None


def _is_tensor(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")


def load_for_model(config, description: ModelDescription) -> LoaderConfig:
    """``config`` loaded for the model (its names replacing the ``model`` block where it has names), checked
    against it; one ConfigError with every problem."""
    names = model_names(description)
    try:
        loaded = load_config(config, model_names=names)
    except ConfigError as error:
        if names is None:
            if description.kind != "subclassed" and any(p.path.startswith("$.model") for p in error.problems):
                raise ConfigError([Problem(MODEL, "$", (
                    f"the {description.kind} model's tensors have no names: the config's model block names them, "
                    "in the model's order")), *error.problems]) from None
            raise
        # The model's names do not fit the config. When the config's own model block is sound, comparing
        # it with the model says which names differ, and whether shapes and dtypes agree, in one error.
        try:
            own = load_config(config)
        except ConfigError:
            raise error from None
        found = problems(description, own)
        if found:
            raise ConfigError(found) from None
        raise
    if names is None and loaded.model_assumed and description.kind != "subclassed":
        # Matching by position needs the config to say which features are inputs and which targets.
        raise ConfigError(Problem(MODEL, "$", f"the {description.kind} model's tensors have no names: the config's "
                                              "model block names them, in the model's order"))
    found = problems(description, loaded)
    if found:
        raise ConfigError(found)
    return loaded
