"""Loader types by name: the module that reads each type's examples (loaders/__init__.py registers the
built-in ones; this module knows none of them)."""
from __future__ import annotations

from types import ModuleType

from batchloaders.spec.model import LoaderConfig
from batchloaders.errors import suggest

LOADERS: dict[str, ModuleType] = {}


def register(name: str, module: ModuleType) -> None:
    """Make ``module`` (its ``batches`` or ``source``, and optionally ``zero_tails``) read configs of ``name``."""
    if name in LOADERS:
        raise ValueError(f"loader type {name!r} is registered twice")
    LOADERS[name] = module


def of(config: LoaderConfig) -> ModuleType:
    """The module that reads ``config``'s examples."""
    try:
        return LOADERS[config.type]
    except KeyError:
        raise ValueError(f"no loader is registered as {config.type!r}{suggest(config.type, LOADERS)}") from None
