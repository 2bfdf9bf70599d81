"""Building the config's secondary features and processing steps on a batch, one item at a time, and which
item is being built, so that a check built into the graph can name it.

:func:`built` builds one item: its registered type's function, called under extend's checks
(:func:`extend.called`), with the item's place set (in the building thread). A registered function gets its
arguments and tensors, not where the config asked for it; a built-in step's run-time check puts
:func:`place` first in its message, which ``runtime/translate.py`` turns into a DataError at that config
path.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from batchloaders.core.model import SecondaryFeature
from batchloaders.transform.extend import called
from batchloaders.transform.registry import SECONDARY, STEPS

_HERE = threading.local()


def built(batch, source: str, spec) -> None:
    """Build one config item on ``batch`` (a transform.batching.Batch), in place.

    Args:
        batch: the batch; the item's tensor is written into it (a secondary feature's new one, or the tensor a
            step changes), with its lengths when it has any.
        source: the config file.
        spec: a SecondaryFeature or a ProcessingStep of the config.

    Raises:
        ConfigError: naming the item, for what its registered function made or failed at (extend.called).
    """
    if isinstance(spec, SecondaryFeature):
        word, kind, target, promised = "secondary feature", SECONDARY.get(spec.type), spec.to_name, spec.info
        inputs = (batch, spec.info)
    else:
        word, kind, target, promised = "step", STEPS.get(spec.type), spec.tensor, spec.output_info
        inputs = (batch.values[target], batch.lengths.get(target), spec.input_info, spec.output_info)
    with item(source, spec.json_path):
        values, lengths = called(kind, word, source, spec.json_path, lambda: kind.build(spec.args, *inputs),
                                 promised)
    batch.values[target] = values
    batch.zero_tails.discard(target)
    if lengths is None:
        batch.lengths.pop(target, None)
    else:
        batch.lengths[target] = lengths


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
