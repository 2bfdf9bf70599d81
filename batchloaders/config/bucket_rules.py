"""The ``bucketing`` block checked against the tensors a config makes, and its batch sizes resolved.

With ``max_tokens`` the batch size of bucket i is the largest with batch size x the longest
length the bucket admits <= max_tokens. Buckets then need a longest length: the given
boundaries are extended by 10% steps (at least one step each) up to past max_tokens, and
without boundaries they start at 8 steps, so that the last, open bucket only receives
examples longer than the budget, which are an error: a ConfigError when the config and manifest bound
the longest example (a fixed first axis, or a window of at most max_window steps or records), else a
check in the running pipeline naming the first such example's file and record.
"""
from __future__ import annotations

from batchloaders.errors import json_path, suggest
from batchloaders.core.limits import ITEM_BYTES, MAX_BATCH_BYTES, MAX_BATCH_SIZE, elements, gib
from batchloaders.core.model import BucketSpec, format_shape
from batchloaders.config.sections.context import SectionContext
from batchloaders.config.sections.loader import concatenates_records, is_sequence

AT = ("args", "bucketing")
GROWTH = 1.1
FIRST = 8


def token_boundaries(given: list[int], max_tokens: int) -> list[int]:
    out = list(given) or [min(FIRST, max_tokens + 1)]
    while out[-1] <= max_tokens:
        out.append(max(out[-1] + 1, int(out[-1] * GROWTH)))
    return out


def window_bounds(loader_type: str, max_window, primaries: dict, steps) -> dict[str, tuple[int, str, str]]:
    """{tensor: (most steps, why, what else to lower)} for the primary tensors whose first axis is a sequence
    loader's window axis and that no processing step changes: a window holds at most max_window steps
    (continuous_sequence) or max_window records, one row each (a discrete_sequence context feature)."""
    if not isinstance(max_window, int) or not is_sequence(loader_type):
        return {}
    changed = {step.tensor for step in steps}
    unit = "steps" if concatenates_records(loader_type) else "records, one row each"
    return {name: (max_window, f"has up to {max_window} steps: a window holds up to max_window = {max_window} "
                               f"{unit} ($.args.max_window)", "max_window")
            for name, feature in primaries.items()
            if name not in changed and (concatenates_records(loader_type) or not feature.var_len)}


def _longest(by: str, info, bounds: dict) -> tuple[int, str, str | None] | None:
    """(most steps, why, what else to lower) of tensor ``by`` in an example when the config and manifest tell;
    else None."""
    if info is not None and info.shape and info.shape[0] is not None:
        return info.shape[0], f"has shape {format_shape(info.shape)}: {info.shape[0]} steps in every example", None
    return bounds.get(by)


def bucket_spec(ctx: SectionContext, block: dict, *, bounds: dict) -> BucketSpec | None:
    """The resolved spec, or None after reporting why the block cannot be used. ``bounds``: see
    :func:`window_bounds`."""
    at = AT
    tensors, check = ctx.tensors, ctx.check
    by = block["by"]
    info = tensors.get(by)
    ok = _check_by(ctx, by, info)
    boundaries = list(block.get("boundaries", []))
    for i in range(1, len(boundaries)):
        if boundaries[i] <= boundaries[i - 1]:
            check(at + ("boundaries", i), f"found {boundaries[i]} after {boundaries[i - 1]}: expected boundaries "
                                          "that increase strictly")
            ok = False
    sizes, budget = block.get("batch_sizes"), block.get("max_tokens")
    ok = _check_sizes(ctx, sizes, budget, boundaries) and ok
    ok = _check_pad_to_boundary(ctx, block.get("pad_to_boundary", []), boundaries) and ok
    longest = _longest(by, info, bounds) if ok else None
    if budget is not None and longest is not None and longest[0] > budget:
        steps, why, other = longest
        check(at + ("max_tokens",), f"found max_tokens {budget}, fewer than the longest example's steps: tensor "
                                    f"{by!r} {why}; an example over the budget fits no batch: expected max_tokens "
                                    f"at least {steps}" + (f", or {other} at most {budget}" if other else ""))
        ok = False
    if not ok:
        return None
    if budget is not None:
        boundaries = token_boundaries(boundaries, budget)
        # Bucket i admits up to boundaries[i] - 1 steps; the open last bucket only gets lengths > budget.
        sizes = [max(1, budget // (b - 1)) if b > 1 else budget for b in boundaries] + [1]
    sizes = [min(size, MAX_BATCH_SIZE) for size in sizes]  # a budget over tiny lengths would ask for millions
    spec = BucketSpec(by, tuple(boundaries), tuple(sizes), budget, tuple(block.get("pad_to_boundary", [])),
                      json_path(at), check_longest=budget is not None and longest is None)
    return spec if _fits_memory(spec, tensors, ctx.pad_specs, ctx.outputs, check) else None


def _check_by(ctx: SectionContext, by: str, info) -> bool:
    seen = ctx.seen
    if by not in seen:
        ctx.check(AT + ("by",), f"tensor {by!r} is not a primary or secondary feature{suggest(by, seen)}; expected "
                                f"one of: {', '.join(seen)}")
        return False
    if info is not None and info.rank == 0:
        ctx.check(AT + ("by",), f"tensor {by!r} is a scalar per example (shape []): bucketing needs a tensor with a "
                                "first axis whose length chooses the bucket")
        return False
    return True


def _check_sizes(ctx: SectionContext, sizes, budget, boundaries: list[int]) -> bool:
    """Exactly one of batch_sizes (one per bucket) and max_tokens (within the boundaries)."""
    check = ctx.check
    if (sizes is None) == (budget is None):
        check(AT, "found " + ("both batch_sizes and max_tokens" if sizes is not None else "neither batch_sizes nor "
                                                                                          "max_tokens")
              + ": expected exactly one (per-bucket batch sizes, or a token budget)")
        return False
    if sizes is not None:
        if not boundaries:
            check(AT + ("batch_sizes",), "found batch_sizes without boundaries: expected boundaries too (batch_sizes "
                                         "has one entry per bucket, one more than boundaries)")
            return False
        if len(sizes) != len(boundaries) + 1:
            check(AT + ("batch_sizes",), f"found {len(sizes)} batch sizes for {len(boundaries)} boundaries: "
                                         f"expected {len(boundaries) + 1} (one per bucket; the last bucket holds "
                                         f"every length from {boundaries[-1]} on)")
            return False
    elif boundaries and boundaries[-1] - 1 > budget:
        check(AT + ("boundaries", len(boundaries) - 1),
              f"found boundary {boundaries[-1]} above max_tokens {budget}: a bucket for lengths past the budget "
              "could hold no example; expected boundaries up to max_tokens + 1")
        return False
    return True


def _check_pad_to_boundary(ctx: SectionContext, names, boundaries: list[int]) -> bool:
    """Each tensor padded to its bucket's boundary varies in length and is padded, to no fixed length below
    the boundaries."""
    ok = True
    tensors, seen, check = ctx.tensors, ctx.seen, ctx.check
    for i, name in enumerate(names):
        where = AT + ("pad_to_boundary", i)
        pad = ctx.pad_specs.get(name)
        if name not in seen:
            check(where, f"tensor {name!r} is not a primary or secondary feature{suggest(name, seen)}")
            ok = False
        elif name in tensors and tensors[name].shape[:1] != (None,):
            check(where, f"tensor {name!r} has shape {format_shape(tensors[name].shape)}: its first axis does not "
                         "vary, so there is nothing to pad to a bucket boundary; expected a tensor whose length varies")
            ok = False
        elif pad is None:
            continue
        elif pad.batching != "padded":
            check(where, f"tensor {name!r} has batching {pad.batching!r}: only padded tensors are padded to a "
                         "bucket boundary; expected padded batching for it, or not listing it")
            ok = False
        elif pad.shape is not None and pad.shape[0] != -1 and boundaries and boundaries[-1] - 1 > pad.shape[0]:
            check(where, f"tensor {name!r} is padded to {pad.shape[0]} steps ({pad.json_path}.shape) but bucket "
                         f"boundaries pad it to up to {boundaries[-1] - 1}: expected a padding shape of -1 on "
                         "axis 0, or boundaries up to that length + 1")
            ok = False
    return ok


def _fits_memory(spec: BucketSpec, tensors: dict, pad_specs: dict, outputs, check) -> bool:
    """Every bucket's batch at the longest length it admits (1 step in the open last one) fits in memory:
    its examples wait in memory until the batch is full."""
    for bucket, size in enumerate(spec.batch_sizes):
        admits = spec.admits(bucket) or 1
        per_example = 0
        for name in outputs:
            info = tensors.get(name)
            if info is None:
                continue
            pad = pad_specs.get(name)
            dims = [admits if d is None else d for d in info.shape]
            if pad is not None and pad.shape is not None:
                dims = [d if want == -1 else max(d, want) for d, want in zip(dims, pad.shape)]
            per_example += elements(dims) * ITEM_BYTES[info.dtype]
        if size * per_example > MAX_BATCH_BYTES:
            check(("args", "bucketing"), f"bucket {bucket} (lengths up to {admits}) batches {size} examples of at "
                                         f"least {per_example:,} bytes: {gib(size * per_example)}, expected at most "
                                         f"{gib(MAX_BATCH_BYTES)}; lower its batch size or max_tokens")
            return False
    return True
