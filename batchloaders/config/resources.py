"""Memory a config asks for, estimated from the manifest's shapes before any data is read.

Each number of a config is bounded by the schema, but products of numbers are
not: a batch of 2**20 windows of 2**31 steps passes every bound and would still
exhaust memory (or overflow int64 inside TensorFlow) instead of failing with an
error. Variable axes count as 1 step and window axes as max_window, so the
estimate is a lower bound of what the batch holds at its largest.
"""
from __future__ import annotations

from batchloaders.errors import path_parts
from batchloaders.core.limits import ITEM_BYTES, MAX_BATCH_BYTES, MAX_HELD_BYTES, elements, gib
from batchloaders.core.model import format_shape
from batchloaders.config.sections.context import SectionContext
from batchloaders.config.sections.loader import is_sequence
from batchloaders.config.stage_rules import blocks, given


def example_bytes(name: str, info, pad_spec, window: int | None, primaries: dict, chunk: int | None = None) -> int:
    """Bytes of one example of one tensor: padded axes at their padded size, window axes at ``window``,
    a chunked tensor's first axis at the chunk's width ``chunk``."""
    dims = []
    for axis, dim in enumerate(info.shape):
        fixed = pad_spec.shape[axis] if pad_spec is not None and pad_spec.shape is not None else -1
        if axis == 0 and chunk is not None:
            dim = max(chunk, fixed)
        elif fixed != -1:
            dim = fixed if dim is None else max(dim, fixed)
        elif dim is None and axis == 0 and window is not None and name in primaries:
            dim = window  # the window axis of a sequence loader's primary tensor
        dims.append(dim)
    return elements(dims) * ITEM_BYTES[info.dtype]


def check_resources(ctx: SectionContext) -> None:
    """Report a batch, shuffle buffer or read buffers that cannot fit in memory.

    What each checked processing step makes is a whole batch too, even when a later step cuts it down
    (a one_hot of depth 10**6 then sliced to 2 columns). A chunk is made, shuffled and batched at its
    full ``left + size + right`` steps (batches are trimmed to their longest chunk only at the end), so
    it counts that wide.
    """
    args = ctx.args
    _check_step_outputs(ctx)
    # Chunks are examples of their own, of at most left + size + right steps: no window axis.
    window = (args.get("max_window") if is_sequence(ctx.loader_type) and not given(args, "makes_examples")
              else None)
    primaries = {p["to_name"] for p in args["primary_features"]}
    widths = {name: width for stage in blocks() if ctx.regroup.get(stage.name) is not None
              for name, width in stage.chunk_widths(ctx.regroup[stage.name]).items()}
    sizes = {name: example_bytes(name, ctx.tensors[name], ctx.pad_specs.get(name), window, primaries,
                                 widths.get(name))
             for name in sorted(ctx.outputs) if name in ctx.tensors}
    if not sizes:
        return
    per_example = sum(sizes.values())
    largest = max(sizes, key=sizes.get)
    batch = args["target_batch_size"]
    if batch * per_example > MAX_BATCH_BYTES:
        ctx.check(("args", "target_batch_size"),
                  f"one batch of {batch} examples would hold at least {gib(batch * per_example)} "
                  f"({per_example:,} bytes per example, {sizes[largest]:,} of them in tensor {largest!r}, counting "
                  f"variable axes as 1 step{' and window axes as max_window' if window else ''}): expected at most "
                  f"{gib(MAX_BATCH_BYTES)}; lower target_batch_size"
                  f"{', max_window' if window else ''} or the padded shapes")
    _check_buffers(ctx, per_example)


def _check_step_outputs(ctx: SectionContext) -> None:
    batch = ctx.args["target_batch_size"]
    for step in ctx.steps:
        if step.output_info is None:
            continue
        made = batch * example_bytes(step.tensor, step.output_info, None, None, ())
        if made > MAX_BATCH_BYTES:
            ctx.check(path_parts(step.json_path), f"step {step.type!r} on tensor {step.tensor!r} makes "
                                                  f"{step.output_info.dtype} {format_shape(step.output_info.shape)} "
                                                  f"per example: a batch of {batch} holds at least {gib(made)} "
                                                  "(variable axes counted as 1 step): expected at most "
                                                  f"{gib(MAX_BATCH_BYTES)}; lower target_batch_size or the step's "
                                                  "sizes")
            break  # one is enough to fix first; the checks after it still run


def _check_buffers(ctx: SectionContext, per_example: int) -> None:
    """The shuffle buffers hold examples (or chunks) of ``per_example`` bytes; the read buffers, one per open
    file."""
    args, check = ctx.args, ctx.check
    if args.get("shuffle") and args.get("num_shuffle_buffer_elements"):
        held = args["num_shuffle_buffer_elements"] * per_example
        if held > MAX_HELD_BYTES:
            check(("args", "num_shuffle_buffer_elements"),
                  f"a shuffle buffer of {args['num_shuffle_buffer_elements']:,} examples of at least "
                  f"{per_example:,} bytes would hold at least {gib(held)}: expected at most "
                  f"{gib(MAX_HELD_BYTES)}; lower num_shuffle_buffer_elements")
    for stage in blocks():
        if stage.name in args:
            stage.check_held(ctx, args[stage.name], per_example)
    open_files = args.get("num_mix_files") if args.get("shuffle") else args.get("num_parallel_reads")
    open_files = max(1, open_files or 1)
    buffers = open_files * args["num_read_buffer_bytes"]
    if buffers > MAX_HELD_BYTES:
        which = "num_mix_files" if args.get("shuffle") else "num_parallel_reads"
        check(("args", "num_read_buffer_bytes"),
              f"{open_files} open files ({which}) with read buffers of {args['num_read_buffer_bytes']:,} bytes "
              f"would hold {gib(buffers)}: expected at most {gib(MAX_HELD_BYTES)}; lower num_read_buffer_bytes "
              f"or {which}")
