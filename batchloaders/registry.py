"""Name -> implementation registries for secondary feature types and processing steps.

Each type lives in its own module and registers itself here (the built-ins are
imported by ``builtin_types.load``: this module imports none of them); the config
checker and the compiler look types up by name. A duplicate name is a programming
error; an unknown name is a user error and names the closest registered one.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator


@dataclasses.dataclass(frozen=True)
class CheckContext:
    """What a type's ``infer`` may use and how it reports problems (pure Python, no TensorFlow)."""

    loader_type: str
    tensors: dict  # to_name -> TensorInfo built so far
    primaries: dict  # to_name -> ManifestFeature of each primary feature
    report: Callable[[tuple, str], None]  # (json-path parts relative to the item, message)


@dataclasses.dataclass(frozen=True)
class SecondaryType:
    name: str
    schema: str  # schema fragment file in schemas/
    # (args, ctx) -> TensorInfo or None when a problem was reported
    infer: Callable[[dict, CheckContext], Any]
    # (args, batch, info) -> (values [B, ...], lengths [B] or None); runs inside tf.data
    build: Callable[..., Any]
    loaders: tuple[str, ...] = ("independent", "continuous_sequence", "discrete_sequence")


@dataclasses.dataclass(frozen=True)
class StepType:
    name: str
    schema: str
    infer: Callable[[dict, Any, CheckContext], Any]  # (args, TensorInfo, ctx) -> TensorInfo or None
    build: Callable[..., Any]  # (args, values, lengths, info_in) -> (values, lengths)


class Registry:
    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, Any] = {}

    def register(self, item):
        if item.name in self._items:
            raise ValueError(f"{self.kind} {item.name!r} is registered twice")
        self._items[item.name] = item
        return item

    def get(self, name: str):
        return self._items.get(name)

    def names(self) -> list[str]:
        return sorted(self._items)

    def __iter__(self) -> Iterator:
        return iter(self._items.values())


SECONDARY = Registry("secondary feature type")
STEPS = Registry("processing step type")
