"""Which config item the pipeline is being built for, so that a check built into the graph can name it.

A registered function gets its arguments and tensors, not where the config asked for it;
``loaders.base.transform`` sets the place while it builds each item (in the building thread),
and a built-in step's run-time check puts :func:`place` first in its message, which
``runtime/translate.py`` turns into a DataError at that config path.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

_HERE = threading.local()


@contextlib.contextmanager
def item(source: str, json_path: str) -> Iterator[None]:
    """Build the config item at ``json_path`` of ``source`` inside this block."""
    before = getattr(_HERE, "place", None)
    _HERE.place = f"{source}: {json_path}"
    try:
        yield
    finally:
        _HERE.place = before


def place() -> str:
    """'source: $.json.path' of the item being built, or '<a processing step>' outside one."""
    return getattr(_HERE, "place", None) or "<a processing step>"
