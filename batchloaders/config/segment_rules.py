"""The ``segmenting`` block checked against the tensors a config makes; what the model then receives.

Segmented: every model tensor that varies in time (its first axis varies, or is the continuous
loader's window axis), each becoming ``[num_unroll, ...]``. Copied to every segment: the tensors
``context`` names, which must have a fixed shape. Any other model tensor is an error naming it.
The counters (config/model.py COUNTERS, each ``prefix`` + name) become tensors the model may name.
"""
from __future__ import annotations

from batchloaders.errors import json_path, suggest
from batchloaders.config.model import COUNTER_DTYPES, COUNTERS, SegmentSpec, TensorInfo, format_shape

HIDDEN_KEY = "@key"  # to_name of a manifest feature read only to key the sequences


def _varies_in_time(info: TensorInfo, loader_type: str) -> bool:
    if not info.shape:
        return False
    return info.shape[0] is None or loader_type == "continuous_sequence"


def _key_type_problem(dtype: str, shape, per_record: bool = False) -> str | None:
    """Why a tensor of ``dtype`` and ``shape`` cannot key a sequence, or None. ``per_record``: it is a
    discrete window's scalar context feature, one value per record (the window's first record names it)."""
    if dtype != "string" and not dtype.startswith(("int", "uint")):
        return f"dtype {dtype}: expected a string or an integer"
    if tuple(shape) != () and not (per_record and len(shape) == 1):
        return (f"shape {format_shape(shape)}: expected a scalar per example (a discrete_sequence window may be "
                "keyed by a scalar context feature, one per record: its first record's value names the window)")
    return None


def segment_spec(block: dict, tensors: dict, seen: dict, wanted, loader_type: str, manifest, others: list[str],
                 target_batch_size: int, check, primaries: dict | None = None) -> SegmentSpec | None:
    """The spec, or None after reporting; on success ``tensors`` holds the segments' shapes and the counters,
    and ``seen`` the counter names. ``wanted``: the model's tensors, inputs then targets; ``primaries``:
    to_name -> manifest feature (a discrete window's context feature has a row per record, not per step)."""
    at = ("args", "segmenting")
    ok = True
    for other in others:
        check(at, f"found segmenting and {other} together: expected one (segmenting batches consecutive segments "
                  f"of each sequence in a fixed slot; {other} regroups examples its own way)")
        ok = False
    unroll = block["num_unroll"]
    lanes = block.get("batch_size")
    if lanes is not None and lanes != target_batch_size:
        check(at + ("batch_size",), f"found batch_size {lanes} and target_batch_size {target_batch_size}: expected "
                                    "them equal (the lanes are the batch's rows), or batch_size left out")
        ok = False
    prefix = block.get("prefix", "")
    names = {c: prefix + c for c in COUNTERS}
    where = at + ("prefix",) if "prefix" in block else at
    for counter, name in names.items():
        if name in seen:
            check(where, f"counter {counter!r} is named {name!r}, which is a feature already (at "
                         f"{json_path(seen[name])}): expected a prefix that makes the counter names new (e.g. "
                         f"prefix: {(prefix or '') + 'seg_'!r})")
            ok = False
    # Whatever else is wrong, the counters exist: later checks must not call them unproduced.
    for name in names.values():
        seen.setdefault(name, where)
    context = tuple(block.get("context", ()))
    for i, name in enumerate(context):
        if name not in seen or name in names.values():
            known = [n for n in seen if n not in names.values()]
            check(at + ("context", i), f"tensor {name!r} is not a primary or secondary feature{suggest(name, known)}; "
                                       f"expected one of: {', '.join(known)}")
            ok = False
            continue
        info = tensors.get(name)
        if info is not None and None in info.shape:
            check(at + ("context", i), f"tensor {name!r} has shape {format_shape(info.shape)}, which varies in "
                                       "time: expected a tensor of a fixed shape in context (copied whole to every "
                                       "segment); a tensor that varies in time is segmented: leave it out of context")
            ok = False
    key, from_manifest = block.get("key"), None
    if key is not None:
        if key in seen and key not in names.values():
            info = tensors.get(key)
            per_record = (loader_type == "discrete_sequence" and key in (primaries or {})
                          and not primaries[key].var_len and tuple(primaries[key].record_shape) == ())
            why = _key_type_problem(info.dtype, info.shape, per_record) if info is not None else None
            if why:
                check(at + ("key",), f"key tensor {key!r} has {why}")
                ok = False
        elif manifest is not None and key in manifest.features:
            feature = manifest.features[key]
            why = _key_type_problem(feature.dtype, feature.record_shape)
            if loader_type == "continuous_sequence" or feature.var_len:
                why = (f"a feature list or continuous data (var_len {str(feature.var_len).lower()}, loader "
                       f"{loader_type}): expected a context feature of an independent or discrete_sequence dataset, "
                       "or a tensor (to_name) the config makes")
            if why:
                check(at + ("key",), f"manifest feature {key!r} is {why}")
                ok = False
            from_manifest, key = key, HIDDEN_KEY
        else:
            known = [n for n in seen if n not in names.values()] + list(manifest.features if manifest else ())
            check(at + ("key",), f"key {key!r} is neither a tensor the config makes nor a manifest feature"
                                 f"{suggest(key, known)}; expected one of: {', '.join(dict.fromkeys(known))}")
            ok = False
    if not ok:
        return None
    segmented = []
    for name in dict.fromkeys(wanted):
        if name in names.values() or name in context or name not in tensors:
            continue
        info = tensors[name]
        per_record = (loader_type == "discrete_sequence" and name in (primaries or {})
                      and not primaries[name].var_len and info.shape[:1] == (None,))
        if per_record:
            check(at + ("context",), f"model tensor {name!r} has one row per record of a window (a context feature, "
                                     f"shape {format_shape(info.shape)}), not one per step, and windows differ in "
                                     "size: it can be neither segmented nor copied; expected it out of the model, or "
                                     "min_window equal to max_window and it in segmenting.context")
            ok = False
            continue
        if _varies_in_time(info, loader_type):
            segmented.append(name)
            continue
        check(at + ("context",), f"model tensor {name!r} has shape {format_shape(info.shape)}, which does not vary "
                                 "in time, and is not in segmenting.context: expected it in context (copied to "
                                 "every segment), or a tensor that varies in time (segmented)")
        ok = False
    if ok and not segmented:
        check(at, "found no model tensor that varies in time: expected at least one to cut into segments")
        ok = False
    if not ok:
        return None
    for name in segmented:
        info = tensors[name]
        tensors[name] = TensorInfo(info.dtype, (unroll,) + tuple(info.shape[1:]))
    for counter, name in names.items():
        tensors[name] = TensorInfo(COUNTER_DTYPES.get(counter, "int32"), ())
    return SegmentSpec(unroll, lanes, bool(block.get("pad", True)), bool(block.get("allow_small_batch", False)),
                       tuple(segmented), context, key, names, json_path(at), from_manifest)
