"""The ``chunking`` block checked against the tensors a config makes; what the model then receives.

Chunked: every tensor ``tensors`` names, and every model tensor (or tensor a ``length``
feature measures) whose first axis varies in time. Copied whole to each chunk: the other model
tensors (a discrete window's per-record features included: their first axis counts records).
Built on the chunks (config/order.py): the chunk metadata types and a ``length`` of a chunked tensor.
A chunk's first axis varies (the last core may be shorter than ``size``), so a chunked tensor's first
axis becomes ``?``.
"""
from __future__ import annotations

from batchloaders.errors import json_path, path_parts, suggest
from batchloaders.transform.registry import BUILTIN, SECONDARY
from batchloaders.core.model import ChunkSpec, ChunkTensor, TensorInfo
from batchloaders.config.sections.context import SectionContext
from batchloaders.config.sections.loader import stacks_record_rows

AT = ("args", "chunking")


def _measured(secondary) -> dict[str, str]:
    """to_name -> the tensor it measures, for every ``length``-like feature."""
    out = {}
    for feature in secondary:
        kind = SECONDARY.get(feature.type)
        if kind is not None and kind.measures and isinstance(feature.args.get(kind.measures), str):
            out[feature.to_name] = feature.args[kind.measures]
    return out


def per_record(ctx: SectionContext) -> set[str]:
    """A discrete window's per-record features have a record axis, not a time axis: copied, not chunked."""
    features = ctx.manifest.features
    return {p.to_name for p in ctx.primary if stacks_record_rows(ctx.loader_type)
            and p.from_name in features and not features[p.from_name].var_len}


def chunk_spec(ctx: SectionContext, block: dict, *, alone: bool, per_record=frozenset()) -> ChunkSpec | None:
    """The spec, or None after reporting; on success ctx.tensors holds the chunks' shapes.

    Args:
        ctx: the config check so far.
        block: the ``chunking`` block as written, valid against its schema.
        alone: False when another regroup block is given too (reported already): no spec then.
        per_record: tensors whose first axis counts records (a discrete window's context features), chunked
            only when the block's ``tensors`` names them.

    Returns:
        The resolved ChunkSpec, or None when a problem was reported.
    """
    ok = alone
    size = block["size"]
    step = block.get("step", size)
    left, right = block.get("context", (0, 0))
    min_size = block.get("min_size", 1)
    if min_size > size:
        ctx.check(AT + ("min_size",), f"found min_size {min_size} > size {size}: expected at most size (only the "
                                      "last piece can be shorter than size, and min_size says which last pieces are "
                                      "kept)")
        ok = False
    meta = {f.to_name for f in ctx.secondary if getattr(SECONDARY.get(f.type), "after_chunking", False)}
    listed = _listed(ctx, block, meta, (size, step, left, right))
    if not ok or listed is None:
        return None
    measured = _measured(ctx.secondary)
    wanted = ctx.model_tensors
    candidates = set(wanted) | {measured[n] for n in measured if n in wanted}
    chunked = []
    for name, info in ctx.tensors.items():
        if name in listed:
            chunked.append(listed[name])
        elif name in candidates and name not in meta and name not in per_record and info.shape[:1] == (None,):
            chunked.append(ChunkTensor(name, size, step, left, right))
    reference = _reference(ctx, chunked, size, step)
    names = {t.name for t in chunked}
    on_chunks = meta | {n for n, t in measured.items() if t in names}
    if reference is None or not _no_steps_on_chunks(ctx, on_chunks):
        return None
    copied = tuple(n for n in dict.fromkeys(wanted) if n in ctx.tensors and n not in names and n not in on_chunks)
    for t in chunked:
        info = ctx.tensors[t.name]
        ctx.tensors[t.name] = TensorInfo(info.dtype, (None,) + tuple(info.shape[1:]))
    # A plugin's chunk metadata type may read extras["chunk"]["source_key"] too (extend.py promises it).
    uses_source = any(f.type == "source_key" or (f.to_name in meta and SECONDARY.get(f.type).scope != BUILTIN)
                      for f in ctx.secondary)
    return ChunkSpec(size, step, left, right, min_size, block.get("shuffle_buffer"), tuple(chunked), copied,
                     reference, json_path(AT), uses_source)


def _listed(ctx: SectionContext, block: dict, meta: set, defaults: tuple) -> dict[str, ChunkTensor] | None:
    """tensor -> its entry of the block's ``tensors`` (the block's size, step and context unless it says
    otherwise), or None after reporting a bad entry. ``meta``: the chunk metadata features."""
    size, step, left, right = defaults
    ok = True
    listed: dict[str, ChunkTensor] = {}
    for i, entry in enumerate(block.get("tensors", ())):
        where, name = AT + ("tensors", i), entry["tensor"]
        if name not in ctx.seen or name in meta:
            known = [n for n in ctx.seen if n not in meta]
            ctx.check(where + ("tensor",), f"tensor {name!r} is not a primary or secondary feature that exists "
                                           f"before chunking{suggest(name, known)}; expected one of: "
                                           f"{', '.join(known)}")
            ok = False
            continue
        if name in listed:
            ctx.check(where + ("tensor",), f"duplicate entry for tensor {name!r}: expected one entry per tensor")
            ok = False
            continue
        info = ctx.tensors.get(name)
        if info is not None and info.rank == 0:
            ctx.check(where + ("tensor",), f"tensor {name!r} is a scalar per example (shape []): chunking cuts "
                                           "tensors along their first axis; expected a tensor with one (scalars are "
                                           "copied to every chunk)")
            ok = False
            continue
        t_size = entry.get("size", size)
        t_step = entry.get("step", t_size if "size" in entry else step)
        t_left, t_right = entry.get("context", (left, right))
        listed[name] = ChunkTensor(name, t_size, t_step, t_left, t_right)
    return listed if ok else None


def _reference(ctx: SectionContext, chunked: list[ChunkTensor], size: int, step: int) -> str | None:
    """The chunked tensor at the block's own size and step (it fixes the number of chunks), or None after
    reporting."""
    if not chunked:
        ctx.check(AT, "found no tensor to chunk: expected a model tensor whose first axis varies, or a tensors "
                      "entry naming one to chunk")
        return None
    reference = next((t.name for t in chunked if (t.size, t.step) == (size, step)), None)
    if reference is None:
        names = {t.name for t in chunked}
        ctx.check(AT + ("tensors",), f"every chunked tensor ({', '.join(sorted(names))}) overrides size or step: "
                                     f"expected at least one at the block's size {size} and step {step} (it fixes "
                                     "the number of chunks, and min_size applies to its last piece)")
    return reference


def _no_steps_on_chunks(ctx: SectionContext, on_chunks: set) -> bool:
    """No processing step on a tensor built on the chunks; else reported."""
    ok = True
    for s in ctx.steps:
        if s.tensor in on_chunks:
            ctx.check(path_parts(s.json_path) + ("tensor",),
                      f"tensor {s.tensor!r} is built on the chunks, after every processing step has run (steps run "
                      "on whole examples, before chunking): expected no step on it")
            ok = False
    return ok
