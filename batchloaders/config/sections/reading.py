"""The reading args (how files are read, parsed and handed on) as a ReadOptions. The schema bounds each;
config/resources.py checks the memory their read buffers take."""
from __future__ import annotations

import dataclasses

from batchloaders.core.model import ReadOptions
from batchloaders.config.sections.context import SectionContext

# Args where -1 leaves the number to tf.data (AUTOTUNE): None in ReadOptions.
_TUNED = ("num_parallel_reads", "num_parallel_parses", "num_prefetch")


def read_options(ctx: SectionContext) -> ReadOptions:
    """The config's reading args, defaults filled in.

    Args:
        ctx: the checked config's context (its args passed the schema).

    Returns:
        Its ReadOptions.
    """
    given = {f.name: ctx.args[f.name] for f in dataclasses.fields(ReadOptions) if f.name in ctx.args}
    return ReadOptions(**{key: None if key in _TUNED and value == -1 else value for key, value in given.items()})
