"""The ``packing`` block checked against the tensors a config makes; what the model then receives.

A block packs one group of tensors (``length``, ``tensors``, ``segment_ids``, ``positions``) or lists
``groups``, each with its own row length and segment tensors (an encoder-decoder's inputs and targets).
"""
from __future__ import annotations

from batchloaders.errors import json_path, path_parts, suggest
from batchloaders.core.model import PackGroup, PackSpec, TensorInfo, format_shape
from batchloaders.config.sections.context import SectionContext

AT = ("args", "packing")
# Keys of the one-group form, which a block with groups gives per group instead.
GROUP_KEYS = ("length", "tensors", "segment_ids", "positions")


def _groups(ctx: SectionContext, block: dict) -> list[tuple[PackGroup, tuple]] | None:
    """(group, its path) for each group the block gives, defaults filled in; None after reporting."""
    if "groups" not in block:
        return [(PackGroup(tuple(block["tensors"]), block["length"], block.get("segment_ids", "segment_ids"),
                           block.get("positions", "positions")), AT)]
    ok = True
    for key in GROUP_KEYS:
        if key in block:
            ctx.check(AT + (key,), f"found {key} beside groups: expected it in each group (a block packs one "
                                   "group, or lists them all in groups)")
            ok = False
    if block.get("allow_split", False):
        ctx.check(AT + ("allow_split",), "found allow_split true with groups: expected false (a piece of an "
                                         "example's inputs has no matching piece of its targets; trim long "
                                         "examples with a slice step instead)")
        ok = False
    out = []
    for i, group in enumerate(block["groups"]):
        first = group["tensors"][0]
        out.append((PackGroup(tuple(group["tensors"]), group["length"],
                              group.get("segment_ids", f"{first}_segment_ids"),
                              group.get("positions", f"{first}_positions")), AT + ("groups", i)))
    return out if ok else None


def _made_names(block: dict) -> list[str]:
    """The segment ids and positions names a block gives or defaults to, as far as it can be read."""
    if "groups" not in block:
        return [block.get("segment_ids", "segment_ids"), block.get("positions", "positions")]
    return [g.get(key, f"{g['tensors'][0]}_{key}") for g in block["groups"] if g.get("tensors")
            for key in ("segment_ids", "positions")]


def _check_names(ctx: SectionContext, groups: list[tuple[PackGroup, tuple]]) -> bool:
    """Each group's segment ids and positions are new names, no two alike; each tensor is in one group."""
    ok, made = True, {}
    for group, at in groups:
        for key in ("segment_ids", "positions"):
            name = getattr(group, key)
            if name in ctx.seen:
                ctx.check(at + (key,), f"found {name!r}, the name of a feature already: expected another name "
                                       f"for the packed rows' {key.replace('_', ' ')}")
                ok = False
            elif name in made:
                ctx.check(at + (key,), f"found {name!r} for the {key.replace('_', ' ')} here and at "
                                       f"{json_path(made[name])}: expected a name of its own for each")
                ok = False
            made.setdefault(name, at + (key,))
    owner: dict[str, tuple] = {}
    for group, at in groups:
        for i, name in enumerate(group.tensors):
            if name in owner:
                ctx.check(at + ("tensors", i), f"tensor {name!r} is in two groups (also at {json_path(owner[name])}):"
                                               " expected each packed tensor in one group")
                ok = False
            owner.setdefault(name, at + ("tensors", i))
    # Whatever else is wrong, these names exist: later checks must not call them unproduced.
    for group, at in groups:
        for key in ("segment_ids", "positions"):
            ctx.seen.setdefault(getattr(group, key), at + (key,))
    return ok


def _check_tensors(ctx: SectionContext, groups: list[tuple[PackGroup, tuple]]) -> bool:
    """Every packed tensor is made and has a first axis; every model tensor is packed or made by packing."""
    ok = True
    made = {getattr(g, key): at + (key,) for g, at in groups for key in ("segment_ids", "positions")}
    for group, at in groups:
        for i, name in enumerate(group.tensors):
            if name in made:
                ctx.check(at + ("tensors", i), f"tensor {name!r} is made by packing (at {json_path(made[name])}): "
                                               "expected a feature the loader reads or builds")
                ok = False
            elif name not in ctx.seen:
                ctx.check(at + ("tensors", i), f"tensor {name!r} is not a primary or secondary feature"
                                               f"{suggest(name, ctx.seen)}")
                ok = False
            elif name in ctx.tensors and ctx.tensors[name].rank == 0:
                ctx.check(at + ("tensors", i), f"tensor {name!r} is a scalar per example (shape []): packing "
                                               "concatenates examples along their first axis; expected tensors "
                                               "with one")
                ok = False
    if not ok:
        return False  # (an unknown name above says enough)
    listed = {n for g, _ in groups for n in g.tensors}
    for name in sorted(ctx.wanted - listed - set(made)):
        ctx.check(AT + ("tensors",) if len(groups) == 1 and groups[0][1] == AT else AT + ("groups",),
                  f"model tensor {name!r} is not packed: every model tensor but the segment ids and positions "
                  f"({', '.join(sorted(made))}) goes into the rows (a per-example value has no place in a row holding "
                  "several examples); expected it among the packed tensors, or not a model tensor")
        ok = False
    return ok


def _row_shapes(ctx: SectionContext, groups: list[tuple[PackGroup, tuple]], allow_split: bool) -> bool:
    """ctx.tensors gains the rows' shapes; False after reporting a tensor longer than its row."""
    for group, at in groups:
        for name in group.tensors:
            info = ctx.tensors.get(name)
            if info is None:
                continue
            if info.shape[0] is not None and info.shape[0] > group.length and not allow_split:
                ctx.check(at + ("length",), f"tensor {name!r} has {info.shape[0]} steps per example "
                                            f"({format_shape(info.shape)}), more than a row of {group.length}: "
                                            "expected a longer row" + ("" if at != AT else ", or allow_split true"))
                return False
            ctx.tensors[name] = TensorInfo(info.dtype, (group.length,) + tuple(info.shape[1:]))
        for name in (group.segment_ids, group.positions):
            ctx.tensors[name] = TensorInfo("int32", (group.length,))
    return True


def pack_spec(ctx: SectionContext, block: dict, *, alone: bool) -> PackSpec | None:
    """The spec, or None after reporting; on success ctx.tensors and ctx.seen gain the row shapes and the
    segment ids and positions tensors the model names.

    Args:
        ctx: the config check so far (tensors, names seen, model tensors wanted, where problems go).
        block: the ``packing`` block as written, valid against its schema.
        alone: False when another regroup block is given too (reported already): no spec then.

    Returns:
        The resolved PackSpec, or None when a problem was reported.
    """
    groups = _groups(ctx, block)
    if groups is None:
        for name in _made_names(block):  # they exist whatever is wrong: later checks must not call them unproduced
            ctx.seen.setdefault(name, AT)
        return None
    if not (_check_names(ctx, groups) and alone and _check_tensors(ctx, groups)):
        return None
    allow_split = bool(block.get("allow_split", False))
    if not _row_shapes(ctx, groups, allow_split):
        return None
    first = groups[0][0]
    return PackSpec(first.length, tuple(n for g, _ in groups for n in g.tensors), first.segment_ids, first.positions,
                    allow_split, json_path(AT), groups=tuple(g for g, _ in groups) if "groups" in block else ())


def check_batching(ctx: SectionContext, spec: PackSpec) -> None:
    """A packed row holds several examples, so no row is "an example": each packed tensor's batching must be
    padded."""
    for name in spec.tensors:
        pad = ctx.pad_specs.get(name)
        if pad is not None and pad.batching != "padded":
            ctx.check(path_parts(pad.json_path) + ("batching",),
                      f"found batching {pad.batching!r} for tensor {name!r}, which packing fills rows of a "
                      "fixed length with: expected padded (a packed row is not one example)")
