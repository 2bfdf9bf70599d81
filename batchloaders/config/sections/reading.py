"""The reading args (how files are read, parsed and handed on) as a ReadOptions. The schema bounds each;
config/resources.py checks the memory their read buffers take."""
from __future__ import annotations

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
    args = ctx.args
    given = {key: args[key] for key in ("num_read_buffer_bytes", "num_prefetch", "num_parallel_reads",
                                        "num_parallel_parses", "sloppy_interleave",
                                        "num_interleave_out_buffer_elements", "num_interleave_in_buffer_elements",
                                        "on_corrupt") if key in args}
    return ReadOptions(**{key: None if key in _TUNED and value == -1 else value for key, value in given.items()})
