"""The ``bucketing`` block checked against the tensors a config makes, and its batch sizes resolved.

With ``max_tokens`` the batch size of bucket i is the largest with batch size x the longest
length the bucket admits <= max_tokens. Buckets then need a longest length: the given
boundaries are extended by 10% steps (at least one step each) up to past max_tokens, and
without boundaries they start at 8 steps, so that the last, open bucket only receives
examples longer than the budget, which are an error.
"""
from __future__ import annotations

from batchloaders.errors import json_path, suggest
from batchloaders.spec.model import BucketSpec, format_shape

GROWTH = 1.1
FIRST = 8


def token_boundaries(given: list[int], max_tokens: int) -> list[int]:
    out = list(given) or [min(FIRST, max_tokens + 1)]
    while out[-1] <= max_tokens:
        out.append(max(out[-1] + 1, int(out[-1] * GROWTH)))
    return out


def bucket_spec(block, tensors: dict, seen: dict, check) -> BucketSpec | None:
    """The resolved spec, or None after reporting why the block cannot be used."""
    at = ("args", "bucketing")
    ok = True
    by = block["by"]
    info = tensors.get(by)
    if by not in seen:
        check(at + ("by",), f"tensor {by!r} is not a primary or secondary feature{suggest(by, seen)}; expected "
                            f"one of: {', '.join(seen)}")
        ok = False
    elif info is not None and info.rank == 0:
        check(at + ("by",), f"tensor {by!r} is a scalar per example (shape []): bucketing needs a tensor with a "
                            "first axis whose length chooses the bucket")
        ok = False
    boundaries = list(block.get("boundaries", []))
    for i in range(1, len(boundaries)):
        if boundaries[i] <= boundaries[i - 1]:
            check(at + ("boundaries", i), f"found {boundaries[i]} after {boundaries[i - 1]}: expected boundaries "
                                          "that increase strictly")
            ok = False
    sizes, budget = block.get("batch_sizes"), block.get("max_tokens")
    if (sizes is None) == (budget is None):
        check(at, "found " + ("both batch_sizes and max_tokens" if sizes is not None else "neither batch_sizes nor "
                                                                                          "max_tokens")
              + ": expected exactly one (per-bucket batch sizes, or a token budget)")
        ok = False
    elif sizes is not None:
        if not boundaries:
            check(at + ("batch_sizes",), "found batch_sizes without boundaries: expected boundaries too (batch_sizes "
                                         "has one entry per bucket, one more than boundaries)")
            ok = False
        elif len(sizes) != len(boundaries) + 1:
            check(at + ("batch_sizes",), f"found {len(sizes)} batch sizes for {len(boundaries)} boundaries: "
                                         f"expected {len(boundaries) + 1} (one per bucket; the last bucket holds "
                                         f"every length from {boundaries[-1]} on)")
            ok = False
    elif boundaries and boundaries[-1] - 1 > budget:
        check(at + ("boundaries", len(boundaries) - 1),
              f"found boundary {boundaries[-1]} above max_tokens {budget}: a bucket for lengths past the budget "
              "could hold no example; expected boundaries up to max_tokens + 1")
        ok = False
    for i, name in enumerate(block.get("pad_to_boundary", [])):
        where = at + ("pad_to_boundary", i)
        if name not in seen:
            check(where, f"tensor {name!r} is not a primary or secondary feature{suggest(name, seen)}")
            ok = False
        elif name in tensors and tensors[name].shape[:1] != (None,):
            check(where, f"tensor {name!r} has shape {format_shape(tensors[name].shape)}: its first axis does not "
                         "vary, so there is nothing to pad to a bucket boundary; expected a tensor whose length varies")
            ok = False
    if not ok:
        return None
    if budget is not None:
        boundaries = token_boundaries(boundaries, budget)
        # Bucket i admits up to boundaries[i] - 1 steps; the open last bucket only gets lengths > budget.
        sizes = [max(1, budget // (b - 1)) if b > 1 else budget for b in boundaries] + [1]
    return BucketSpec(by, tuple(boundaries), tuple(sizes), budget, tuple(block.get("pad_to_boundary", [])),
                      json_path(at))
