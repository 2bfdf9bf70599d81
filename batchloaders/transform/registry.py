"""Name -> implementation registries for secondary feature types, processing steps and batchers.

Each type lives in its own module and registers itself here through the public
decorators of :mod:`batchloaders.transform.extend` (the built-ins are imported by
``builtin_types.load``: this module imports none of them, nor anything else of
the package). The config checker, the schema generator and the compiler look
types up by name. An unknown name is a user error and names the closest
registered one.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Collection, Iterator


class LoaderTypes(Collection[str]):
    """The loader type names, as the loader kinds table adds them (config/kinds.py: its rows, and each
    loader registered with a kind of its own). A type registered for ``ALL_LOADERS`` keeps this object
    itself, so it serves every loader type, the ones registered after it too."""

    def __init__(self):
        self._names: list[str] = []
        self.version = 0  # bumped on every change: the loader config schema's enum is made from these names

    def extend(self, names) -> None:
        """Add ``names`` (each once)."""
        self._names.extend(n for n in names if n not in self._names)
        self.version += 1

    def discard(self, name: str) -> None:
        """Forget ``name`` (a loader type a test registered)."""
        if name in self._names:
            self._names.remove(name)
            self.version += 1

    def __contains__(self, name) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names))

    def __len__(self) -> int:
        return len(self._names)

    # As the tuple it replaced: plugins wrote ``ALL_LOADERS + ("mine",)`` and ``ALL_LOADERS[0]``.
    def __getitem__(self, index):
        return tuple(self._names)[index]

    def __add__(self, other) -> tuple:
        return tuple(self._names) + tuple(other)

    def __radd__(self, other) -> tuple:
        return tuple(other) + tuple(self._names)


ALL_LOADERS = LoaderTypes()
# The batching policies every tensor can name (batching.py builds them); registered batchers add more.
POLICIES = ("padded", "dense", "ragged", "sparse")
# Who may see a registered type. The built-ins, and whatever a program registers itself (or the
# command line's --plugins imports), are seen by every config: scopes BUILTIN and GLOBAL. A plugin
# that a config's `plugins:` list imports registers under its file's path, and only the configs that
# name that file see its types: whether a config is valid never depends on which configs came before.
BUILTIN, GLOBAL = "builtin", None
ALWAYS = frozenset({BUILTIN, GLOBAL})


@dataclasses.dataclass(frozen=True)
class CheckContext:
    """What a type's ``infer`` may use and how it reports problems (pure Python, no TensorFlow).

    Attributes:
        loader_type: the config's loader type (``independent``, ``continuous_sequence``, ...).
        tensors: to_name -> TensorInfo of each tensor built so far.
        primaries: to_name -> ManifestFeature of each primary feature.
        report: ``report(parts, message)`` reports a problem at the JSON path ``parts`` (a tuple, relative to the
            item, e.g. ``("args", "key")``), with a message in the form ``"found ...: expected ..."``.
        base_dir: the config file's directory: relative paths in args are relative to it.
    """

    loader_type: str
    tensors: dict  # to_name -> TensorInfo built so far
    primaries: dict  # to_name -> ManifestFeature of each primary feature
    report: Callable[[tuple, str], None]  # (json-path parts relative to the item, message)
    base_dir: str = "."  # the config file's directory: relative paths in args are relative to it


@dataclasses.dataclass(frozen=True)
class SecondaryType:
    name: str
    schema: dict  # JSON Schema of the args object
    # (args, ctx) -> TensorInfo or None when a problem was reported
    infer: Callable[[dict, CheckContext], Any]
    # (args, batch, info) -> (values [B, ...], lengths [B] or None); runs inside tf.data
    build: Callable[..., Any]
    loaders: Collection[str] = ALL_LOADERS
    origin: str = ""  # "file: function f, line N" of the function registered, for messages
    # The arg naming a tensor this type measures as the processing steps leave it (``length``):
    # such a feature is built after the steps on that tensor, not with the other secondaries.
    measures: str | None = None
    scope: str | None = GLOBAL
    # Built from a chunk's metadata (``batch.extras["chunk"]``) once the examples are cut into chunks
    # (chunk_index, chunk_count, source_key): only in configs with a ``chunking`` block.
    after_chunking: bool = False


@dataclasses.dataclass(frozen=True)
class StepType:
    name: str
    schema: dict
    infer: Callable[[dict, Any, CheckContext], Any]  # (args, TensorInfo, ctx) -> TensorInfo or None
    build: Callable[..., Any]  # (args, values, lengths, info_in, info_out) -> (values, lengths)
    loaders: Collection[str] = ALL_LOADERS
    origin: str = ""
    scope: str | None = GLOBAL


@dataclasses.dataclass(frozen=True)
class BatcherType:
    name: str
    schema: dict
    build: Callable[..., Any]  # (examples: RaggedTensor or Tensor [B, ...], **args) -> Tensor, RaggedTensor or SparseTensor
    origin: str = ""
    scope: str | None = GLOBAL


class DuplicateName(ValueError):
    """A name registered twice: the second registration would silently replace the first."""


class Registry:
    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, Any] = {}
        self.version = 0  # bumped on every change: caches of generated schemas key on it

    def register(self, item):
        if item.name in self._items:
            first = self._items[item.name].origin or "an earlier registration"
            raise DuplicateName(f"{self.kind} {item.name!r} is registered twice: first by {first}, "
                                f"again by {item.origin or 'this registration'}; expected a new name")
        self._items[item.name] = item
        self.version += 1
        return item

    def get(self, name: str, scopes=None):
        """The type ``name``; with ``scopes``, only if it was registered in one of them."""
        item = self._items.get(name)
        return item if item is not None and (scopes is None or item.scope in scopes) else None

    def names(self, scopes=None) -> list[str]:
        return sorted(n for n, item in self._items.items() if scopes is None or item.scope in scopes)

    def __iter__(self) -> Iterator:
        return iter(self._items.values())

    def rescope(self, old: str | None, new: str | None) -> None:
        """Move the types registered under scope ``old`` to ``new`` (a plugin file named on the command line
        after a config's own import of it: its types are then seen by every config, see plugins.py)."""
        moved = {n: dataclasses.replace(item, scope=new) for n, item in self._items.items() if item.scope == old}
        if moved:
            self._items.update(moved)
            self.version += 1

    def snapshot(self) -> dict:
        return dict(self._items)

    def restore(self, snapshot: dict) -> None:
        """Forget what was registered since ``snapshot`` (tests register throwaway plugins)."""
        self._items = dict(snapshot)
        self.version += 1


SECONDARY = Registry("secondary feature type")
STEPS = Registry("processing step type")
BATCHERS = Registry("batcher")


def version() -> tuple[int, int, int, int]:
    return SECONDARY.version, STEPS.version, BATCHERS.version, ALL_LOADERS.version
