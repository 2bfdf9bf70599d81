"""The ``packing`` block checked against the tensors a config makes; what the model then receives."""
from __future__ import annotations

from batchloaders.errors import json_path, suggest
from batchloaders.spec.model import PackSpec, TensorInfo, format_shape
from batchloaders.config.sections.context import SectionContext


def pack_spec(ctx: SectionContext, block: dict, *, bucketing: bool) -> PackSpec | None:
    """The spec, or None after reporting; on success ctx.tensors and ctx.seen gain the row shapes and the
    segment ids and positions tensors the model names. ``bucketing``: the args give a bucketing block too."""
    tensors, seen, wanted, check = ctx.tensors, ctx.seen, ctx.wanted, ctx.check
    at = ("args", "packing")
    ok = True
    if bucketing:
        check(at, "found packing and bucketing together: expected one (packing fills rows of a fixed length, "
                  "bucketing batches examples of similar length)")
        ok = False
    segment_ids, positions = block.get("segment_ids", "segment_ids"), block.get("positions", "positions")
    for key, name in (("segment_ids", segment_ids), ("positions", positions)):
        if name in seen:
            check(at + (key,), f"found {name!r}, the name of a feature already: expected another name for the "
                               f"packed rows' {key.replace('_', ' ')}")
            ok = False
    if segment_ids == positions:
        check(at + ("positions",), f"found {positions!r} for both segment_ids and positions: expected two names")
        ok = False
    # Whatever else is wrong, these names exist: later checks must not call them unproduced.
    for name, key in ((segment_ids, "segment_ids"), (positions, "positions")):
        seen.setdefault(name, at + (key,))
    if not ok:
        return None
    listed = block["tensors"]
    for i, name in enumerate(listed):
        if name not in seen:
            check(at + ("tensors", i), f"tensor {name!r} is not a primary or secondary feature{suggest(name, seen)}")
            ok = False
        elif name in tensors and tensors[name].rank == 0:
            check(at + ("tensors", i), f"tensor {name!r} is a scalar per example (shape []): packing concatenates "
                                       "examples along their first axis; expected tensors with one")
            ok = False
    made = {segment_ids, positions}
    for name in sorted(wanted - set(listed) - made) if ok else ():  # (an unknown name above says enough)
        check(at + ("tensors",), f"model tensor {name!r} is not packed: every model tensor but {segment_ids!r} and "
                                 f"{positions!r} goes into the rows (a per-example value has no place in a row "
                                 f"holding several examples); expected it in packing.tensors, or not a model tensor")
        ok = False
    if not ok:
        return None
    length = block["length"]
    for name in listed:
        info = tensors.get(name)
        if info is not None:
            if info.shape[0] is not None and info.shape[0] > length and not block.get("allow_split", False):
                check(at + ("length",), f"tensor {name!r} has {info.shape[0]} steps per example "
                                        f"({format_shape(info.shape)}), more than a row of {length}: expected a "
                                        "longer row, or allow_split true")
                return None
            tensors[name] = TensorInfo(info.dtype, (length,) + tuple(info.shape[1:]))
    for name in (segment_ids, positions):
        tensors[name] = TensorInfo("int32", (length,))
    return PackSpec(length, tuple(listed), segment_ids, positions, bool(block.get("allow_split", False)),
                    json_path(at))
