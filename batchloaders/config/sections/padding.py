"""``args.padding``: which tensors are padded (to what shape and value) or batched by another policy."""
from __future__ import annotations

from batchloaders.errors import json_path, suggest
from batchloaders.transform.registry import BATCHERS
from batchloaders.core.model import PadSpec
from batchloaders.core.values import check_value
from batchloaders.config.sections.context import SectionContext


def check_padding(ctx: SectionContext) -> None:
    """Sets ctx.padding (any padding at all) and ctx.pad_specs (tensor -> its entry)."""
    if not ctx.valid(("args", "padding")):
        return
    value = ctx.args.get("padding", False)
    if value is False or value == []:
        return
    ctx.padding = True
    if value is True:
        return
    for i, entry in enumerate(value):
        spec = _pad_entry(ctx, entry, ("args", "padding", i))
        if spec is not None:
            ctx.pad_specs[spec.tensor] = spec


def _pad_entry(ctx: SectionContext, p: dict, at: tuple) -> PadSpec | None:
    name = p["tensor"]
    if name not in ctx.seen:
        ctx.check(at + ("tensor",), f"tensor {name!r} is not a primary or secondary feature{suggest(name, ctx.seen)}")
        return None
    if name in ctx.pad_specs:
        ctx.check(at + ("tensor",), f"duplicate padding for tensor {name!r}: expected one entry per tensor")
        return None
    info = ctx.tensors.get(name)
    shape = tuple(p["shape"]) if "shape" in p else None
    if info is not None and shape is not None:
        _check_shape(ctx, shape, info, at, name)
    if info is not None and "value" in p:
        why = check_value(p["value"], info.dtype)
        if why:
            ctx.check(at + ("value",), why)
    batching = p.get("batching", "padded")
    _batching_rules(ctx, p, at, info)
    return PadSpec(name, shape, p.get("value"), json_path(at), batching, dict(p.get("batching_args", {})))


def _check_shape(ctx: SectionContext, shape: tuple, info, at: tuple, name: str) -> None:
    if len(shape) != info.rank:
        ctx.check(at + ("shape",), f"found a shape of rank {len(shape)} {list(shape)} for tensor {name!r} of "
                                   f"rank {info.rank}: expected {info.rank} entries (no batch axis; -1 = batch "
                                   "maximum)")
        return
    for axis, (want, dim) in enumerate(zip(shape, info.shape)):
        if want != -1 and dim is not None and want < dim:
            ctx.check(at + ("shape", axis), f"found {want} on axis {axis} but the tensor is {dim} long "
                                            f"there: expected -1 or at least {dim} (padding never cuts)")


def _batching_rules(ctx: SectionContext, entry: dict, at: tuple, info) -> None:
    """What a batching policy needs of its tensor and of the entry's other keys."""
    name, batching = entry["tensor"], entry.get("batching", "padded")
    if batching != "padded":
        for key in ("shape", "value"):
            if key in entry:
                ctx.check(at + (key,), f"found {key} with batching {batching!r}: shape and value apply to padded "
                                       "batching only; expected no shape or value, or batching padded")
    if "batching_args" in entry and BATCHERS.get(batching, ctx.scopes) is None:
        ctx.check(at + ("batching_args",), f"found batching_args with batching {batching!r}: expected them only "
                                           f"with a registered batcher "
                                           f"({', '.join(BATCHERS.names(ctx.scopes)) or 'none is registered'})")
    if info is None:
        return
    shape = "[" + ", ".join("?" if d is None else str(d) for d in info.shape) + "]"
    if batching == "dense" and None in info.shape:
        ctx.check(at + ("batching",), f"tensor {name!r} has shape {shape}, whose length varies between examples: "
                                      "dense batching stacks examples of one shape; expected padded, ragged or "
                                      "sparse batching, or a fixed length")
    if batching == "ragged" and info.rank == 0:
        ctx.check(at + ("batching",), f"tensor {name!r} is a scalar per example (shape []): ragged batching needs "
                                      "an axis to be ragged along; expected dense, padded or sparse batching")
