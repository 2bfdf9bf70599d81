"""The ``chunking`` block checked against the tensors a config makes; what the model then receives.

Chunked: every tensor ``tensors`` names, and every model tensor (or tensor a ``length``
feature measures) whose first axis varies in time. Copied whole to each chunk: the other model
tensors (a discrete window's per-record features included: their first axis counts records). Built on the chunks (config/order.py): the chunk metadata types and a ``length`` of a
chunked tensor. A chunk's first axis varies (the last core may be shorter than ``size``), so a
chunked tensor's first axis becomes ``?``.
"""
from __future__ import annotations

from batchloaders.errors import json_path, path_parts, suggest
from batchloaders.transform.registry import BUILTIN, SECONDARY
from batchloaders.config.model import ChunkSpec, ChunkTensor, TensorInfo


def _measured(secondary) -> dict[str, str]:
    """to_name -> the tensor it measures, for every ``length``-like feature."""
    out = {}
    for feature in secondary:
        kind = SECONDARY.get(feature.type)
        if kind is not None and kind.measures and isinstance(feature.args.get(kind.measures), str):
            out[feature.to_name] = feature.args[kind.measures]
    return out


def chunk_spec(block: dict, tensors: dict, seen: dict, wanted, secondary, steps, others: list[str],
               check, per_record=frozenset()) -> ChunkSpec | None:
    """The spec, or None after reporting; on success ``tensors`` holds the chunks' shapes.

    ``wanted``: the model's tensors, inputs then targets; ``others``: the regrouping blocks also given;
    ``per_record``: tensors whose first axis counts records (a discrete window's context features),
    chunked only when ``tensors`` names them."""
    at = ("args", "chunking")
    ok = True
    for other in others:
        check(at, f"found chunking and {other} together: expected one ({other} regroups whole examples; chunking "
                  "makes each chunk an example of its own)")
        ok = False
    size = block["size"]
    step = block.get("step", size)
    left, right = block.get("context", (0, 0))
    min_size = block.get("min_size", 1)
    if min_size > size:
        check(at + ("min_size",), f"found min_size {min_size} > size {size}: expected at most size (only the last "
                                  "piece can be shorter than size, and min_size says which last pieces are kept)")
        ok = False
    meta = {f.to_name for f in secondary if getattr(SECONDARY.get(f.type), "after_chunking", False)}
    measured = _measured(secondary)
    listed: dict[str, ChunkTensor] = {}
    for i, entry in enumerate(block.get("tensors", ())):
        where, name = at + ("tensors", i), entry["tensor"]
        if name not in seen or name in meta:
            known = [n for n in seen if n not in meta]
            check(where + ("tensor",), f"tensor {name!r} is not a primary or secondary feature that exists before "
                                       f"chunking{suggest(name, known)}; expected one of: {', '.join(known)}")
            ok = False
            continue
        if name in listed:
            check(where + ("tensor",), f"duplicate entry for tensor {name!r}: expected one entry per tensor")
            ok = False
            continue
        info = tensors.get(name)
        if info is not None and info.rank == 0:
            check(where + ("tensor",), f"tensor {name!r} is a scalar per example (shape []): chunking cuts tensors "
                                       "along their first axis; expected a tensor with one (scalars are copied to "
                                       "every chunk)")
            ok = False
            continue
        t_size = entry.get("size", size)
        t_step = entry.get("step", t_size if "size" in entry else step)
        t_left, t_right = entry.get("context", (left, right))
        listed[name] = ChunkTensor(name, t_size, t_step, t_left, t_right)
    if not ok:
        return None
    candidates = set(wanted) | {measured[n] for n in measured if n in wanted}
    chunked = []
    for name, info in tensors.items():
        if name in listed:
            chunked.append(listed[name])
        elif name in candidates and name not in meta and name not in per_record and info.shape[:1] == (None,):
            chunked.append(ChunkTensor(name, size, step, left, right))
    names = {t.name for t in chunked}
    if not chunked:
        check(at, "found no tensor to chunk: expected a model tensor whose first axis varies, or a tensors entry "
                  "naming one to chunk")
        return None
    reference = next((t.name for t in chunked if (t.size, t.step) == (size, step)), None)
    if reference is None:
        check(at + ("tensors",), f"every chunked tensor ({', '.join(sorted(names))}) overrides size or step: expected "
                                 f"at least one at the block's size {size} and step {step} (it fixes the number of "
                                 "chunks, and min_size applies to its last piece)")
        return None
    on_chunks = meta | {n for n, t in measured.items() if t in names}
    for s in steps:
        if s.tensor in on_chunks:
            check(path_parts(s.json_path) + ("tensor",),
                  f"tensor {s.tensor!r} is built on the chunks, after every processing step has run (steps run on "
                  "whole examples, before chunking): expected no step on it")
            ok = False
    if not ok:
        return None
    copied = tuple(n for n in dict.fromkeys(wanted) if n in tensors and n not in names and n not in on_chunks)
    for t in chunked:
        info = tensors[t.name]
        tensors[t.name] = TensorInfo(info.dtype, (None,) + tuple(info.shape[1:]))
    # A plugin's chunk metadata type may read extras["chunk"]["source_key"] too (extend.py promises it).
    uses_source = any(f.type == "source_key" or (f.to_name in meta and SECONDARY.get(f.type).scope != BUILTIN)
                      for f in secondary)
    return ChunkSpec(size, step, left, right, min_size, block.get("shuffle_buffer"), tuple(chunked), copied,
                     reference, json_path(at), uses_source)
