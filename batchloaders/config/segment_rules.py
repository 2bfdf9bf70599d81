"""The ``segmenting`` block checked against the tensors a config makes; what the model then receives.

Segmented: every model tensor that varies in time (its first axis varies, or is the continuous
loader's window axis), each becoming ``[num_unroll, ...]``. Copied to every segment: the tensors
``context`` names, which must have a fixed shape. Any other model tensor is an error naming it.
The counters (core/model.py COUNTERS, each ``prefix`` + name) become tensors the model may name.
"""
from __future__ import annotations

from batchloaders.errors import json_path, path_parts, suggest
from batchloaders.core.model import (COUNTER_DTYPES, COUNTERS, PrimaryFeature, SegmentSpec, TensorInfo,
                                     format_shape)
from batchloaders.config.sections.context import SectionContext
from batchloaders.config.sections.loader import concatenates_records, stacks_record_rows

AT = ("args", "segmenting")
HIDDEN_KEY = "@key"  # to_name of a manifest feature read only to key the sequences


def _varies_in_time(info: TensorInfo, loader_type: str) -> bool:
    if not info.shape:
        return False
    return info.shape[0] is None or concatenates_records(loader_type)


def _key_type_problem(dtype: str, shape, per_record: bool = False) -> str | None:
    """Why a tensor of ``dtype`` and ``shape`` cannot key a sequence, or None. ``per_record``: it is a
    discrete window's scalar context feature, one value per record (the window's first record names it)."""
    if dtype != "string" and not dtype.startswith(("int", "uint")):
        return f"dtype {dtype}: expected a string or an integer"
    if tuple(shape) != () and not (per_record and len(shape) == 1):
        return (f"shape {format_shape(shape)}: expected a scalar per example (a discrete_sequence window may be "
                "keyed by a scalar context feature, one per record: its first record's value names the window)")
    return None


def segment_spec(ctx: SectionContext, block: dict, *, alone: bool) -> SegmentSpec | None:
    """The spec, or None after reporting; on success ctx.tensors holds the segments' shapes and the counters,
    and ctx.seen the counter names.

    Args:
        ctx: the config check so far.
        block: the ``segmenting`` block as written, valid against its schema.
        alone: False when another regroup block is given too (reported already): no spec then.

    Returns:
        The resolved SegmentSpec, or None when a problem was reported.
    """
    ok = alone
    lanes, target_batch_size = block.get("batch_size"), ctx.value("target_batch_size", default=0)
    if lanes is not None and lanes != target_batch_size:
        ctx.check(AT + ("batch_size",), f"found batch_size {lanes} and target_batch_size {target_batch_size}: "
                                        "expected them equal (the lanes are the batch's rows), or batch_size left out")
        ok = False
    names = {c: block.get("prefix", "") + c for c in COUNTERS}
    ok = _claim_counters(ctx, block, names) and ok
    context = tuple(block.get("context", ()))
    ok = _check_context(ctx, context, names) and ok
    key, from_manifest = block.get("key"), None
    if key is not None:
        key, from_manifest, key_ok = _check_key(ctx, key, names)
        ok = key_ok and ok
    segmented = _segmented(ctx, context, names) if ok else None
    if segmented is None:
        return None
    unroll = block["num_unroll"]
    for name in segmented:
        info = ctx.tensors[name]
        ctx.tensors[name] = TensorInfo(info.dtype, (unroll,) + tuple(info.shape[1:]))
    for counter, name in names.items():
        ctx.tensors[name] = TensorInfo(COUNTER_DTYPES.get(counter, "int32"), ())
    return SegmentSpec(unroll, lanes, bool(block.get("pad", True)), bool(block.get("allow_small_batch", False)),
                       tuple(segmented), context, key, names, json_path(AT), from_manifest)


def _claim_counters(ctx: SectionContext, block: dict, names: dict[str, str]) -> bool:
    """The counter names must be new; whatever else is wrong, the counters exist: later checks must not
    call them unproduced."""
    ok = True
    prefix = block.get("prefix", "")
    where = AT + ("prefix",) if "prefix" in block else AT
    for counter, name in names.items():
        if name in ctx.seen:
            ctx.check(where, f"counter {counter!r} is named {name!r}, which is a feature already (at "
                             f"{json_path(ctx.seen[name])}): expected a prefix that makes the counter names new (e.g. "
                             f"prefix: {(prefix or '') + 'seg_'!r})")
            ok = False
    for name in names.values():
        ctx.seen.setdefault(name, where)
    return ok


def _check_context(ctx: SectionContext, context: tuple, names: dict[str, str]) -> bool:
    """The tensors copied to every segment exist and have a fixed shape."""
    ok = True
    for i, name in enumerate(context):
        if name not in ctx.seen or name in names.values():
            known = [n for n in ctx.seen if n not in names.values()]
            ctx.check(AT + ("context", i), f"tensor {name!r} is not a primary or secondary feature"
                                           f"{suggest(name, known)}; expected one of: {', '.join(known)}")
            ok = False
            continue
        info = ctx.tensors.get(name)
        if info is not None and None in info.shape:
            ctx.check(AT + ("context", i), f"tensor {name!r} has shape {format_shape(info.shape)}, which varies in "
                                           "time: expected a tensor of a fixed shape in context (copied whole to "
                                           "every segment); a tensor that varies in time is segmented: leave it out "
                                           "of context")
            ok = False
    return ok


def _check_key(ctx: SectionContext, key: str, names: dict[str, str]) -> tuple[str, str | None, bool]:
    """(the key's to_name, the manifest feature read only to key the sequences or None, whether it is fine)."""
    manifest, primaries, loader_type = ctx.manifest, ctx.primaries, ctx.loader_type
    if key in ctx.seen and key not in names.values():
        info = ctx.tensors.get(key)
        per_record = (stacks_record_rows(loader_type) and key in primaries
                      and not primaries[key].var_len and tuple(primaries[key].record_shape) == ())
        why = _key_type_problem(info.dtype, info.shape, per_record) if info is not None else None
        if why:
            ctx.check(AT + ("key",), f"key tensor {key!r} has {why}")
        return key, None, not why
    if manifest is not None and key in manifest.features:
        feature = manifest.features[key]
        why = _key_type_problem(feature.dtype, feature.record_shape)
        if concatenates_records(loader_type) or feature.var_len:
            why = (f"a feature list or continuous data (var_len {str(feature.var_len).lower()}, loader "
                   f"{loader_type}): expected a context feature of an independent or discrete_sequence dataset, "
                   "or a tensor (to_name) the config makes")
        if why:
            ctx.check(AT + ("key",), f"manifest feature {key!r} is {why}")
        return HIDDEN_KEY, key, not why
    known = [n for n in ctx.seen if n not in names.values()] + list(manifest.features if manifest else ())
    ctx.check(AT + ("key",), f"key {key!r} is neither a tensor the config makes nor a manifest feature"
                             f"{suggest(key, known)}; expected one of: {', '.join(dict.fromkeys(known))}")
    return key, None, False


def _segmented(ctx: SectionContext, context: tuple, names: dict[str, str]) -> list[str] | None:
    """The model tensors cut into segments, or None after reporting one that can be neither segmented
    nor copied."""
    ok = True
    segmented = []
    for name in dict.fromkeys(ctx.model_tensors):
        if name in names.values() or name in context or name not in ctx.tensors:
            continue
        info = ctx.tensors[name]
        per_record = (stacks_record_rows(ctx.loader_type) and name in ctx.primaries
                      and not ctx.primaries[name].var_len and info.shape[:1] == (None,))
        if per_record:
            ctx.check(AT + ("context",), f"model tensor {name!r} has one row per record of a window (a context "
                                         f"feature, shape {format_shape(info.shape)}), not one per step, and windows "
                                         "differ in size: it can be neither segmented nor copied; expected it out of "
                                         "the model, or min_window equal to max_window and it in segmenting.context")
            ok = False
            continue
        if _varies_in_time(info, ctx.loader_type):
            segmented.append(name)
            continue
        ctx.check(AT + ("context",), f"model tensor {name!r} has shape {format_shape(info.shape)}, which does not "
                                     "vary in time, and is not in segmenting.context: expected it in context (copied "
                                     "to every segment), or a tensor that varies in time (segmented)")
        ok = False
    if ok and not segmented:
        ctx.check(AT, "found no model tensor that varies in time: expected at least one to cut into segments")
        ok = False
    return segmented if ok else None


def check_batching(ctx: SectionContext, spec: SegmentSpec) -> None:
    """A segment is num_unroll steps wide, its real steps in the ``length`` counter: each segmented tensor's
    batching must be padded (or dense)."""
    for name in spec.tensors:
        pad = ctx.pad_specs.get(name)
        if pad is not None and pad.batching not in ("padded", "dense"):
            ctx.check(path_parts(pad.json_path) + ("batching",),
                      f"found batching {pad.batching!r} for tensor {name!r}, which segmenting cuts into "
                      f"segments of num_unroll steps: expected padded (each segment's real steps are in the "
                      f"{spec.names['length']!r} counter)")


def key_feature(spec: SegmentSpec) -> tuple[PrimaryFeature, ...]:
    """The manifest feature read only to key the sequences, when the key names one."""
    if spec.key_from_manifest is None:
        return ()
    return (PrimaryFeature(spec.key_from_manifest, spec.key, json_path(AT + ("key",))),)
