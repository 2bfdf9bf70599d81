"""The regroup blocks (chunking, segmenting, packing, bucketing), each checked by its own rules module,
and what they need of the padding list. Results go to ctx.regroup, keyed by block name."""
from __future__ import annotations

from batchloaders.errors import path_parts
from batchloaders.config.bucket_rules import bucket_spec, window_bounds
from batchloaders.config.chunk_rules import chunk_spec
from batchloaders.config.pack_rules import pack_spec
from batchloaders.config.segment_rules import segment_spec
from batchloaders.config.sections.context import SectionContext
from batchloaders.config.sections.loader import stacks_record_rows


def _others(ctx: SectionContext, keys: tuple[str, ...]) -> list[str]:
    """The blocks of ``keys`` the args also give (each one is reported with the block being checked)."""
    return [key for key in keys if key in ctx.args]


def check_chunking(ctx: SectionContext) -> None:
    if not ctx.given("chunking"):
        return
    # A discrete window's per-record features have a record axis, not a time axis: copied, not chunked.
    features = ctx.manifest.features
    per_record = {p.to_name for p in ctx.primary if stacks_record_rows(ctx.loader_type)
                  and p.from_name in features and not features[p.from_name].var_len}
    ctx.regroup["chunking"] = chunk_spec(ctx, ctx.args["chunking"], others=_others(ctx, ("packing", "bucketing")),
                                         per_record=per_record)


def check_segmenting(ctx: SectionContext) -> None:
    if ctx.segmenting_block is not None:
        ctx.regroup["segmenting"] = segment_spec(ctx, ctx.segmenting_block,
                                                 others=_others(ctx, ("packing", "bucketing", "chunking")))


def check_packing(ctx: SectionContext) -> None:
    if ctx.given("packing"):
        ctx.regroup["packing"] = pack_spec(ctx, ctx.args["packing"], bucketing="bucketing" in ctx.args)


def check_bucketing(ctx: SectionContext) -> None:
    """After the padding section: bucket boundaries pad tensors, which must agree with their padding."""
    if ctx.given("bucketing"):
        bounds = window_bounds(ctx.loader_type, ctx.args.get("max_window"), ctx.primaries, ctx.steps)
        ctx.regroup["bucketing"] = bucket_spec(ctx, ctx.args["bucketing"], bounds=bounds)


def check_row_batching(ctx: SectionContext) -> None:
    """Packed rows and segments are cut to a fixed length: their tensors' batching must allow that."""
    packing = ctx.regroup.get("packing")
    if packing is not None:  # rows are dense: a row holds several examples, so no row is "an example"
        for name in packing.tensors:
            spec = ctx.pad_specs.get(name)
            if spec is not None and spec.batching != "padded":
                ctx.check(path_parts(spec.json_path) + ("batching",),
                          f"found batching {spec.batching!r} for tensor {name!r}, which packing fills rows of a "
                          "fixed length with: expected padded (a packed row is not one example)")
    segmenting = ctx.regroup.get("segmenting")
    if segmenting is not None:  # a segment is num_unroll steps wide; its length is the `length` counter
        for name in segmenting.tensors:
            spec = ctx.pad_specs.get(name)
            if spec is not None and spec.batching not in ("padded", "dense"):
                ctx.check(path_parts(spec.json_path) + ("batching",),
                          f"found batching {spec.batching!r} for tensor {name!r}, which segmenting cuts into "
                          f"segments of num_unroll steps: expected padded (each segment's real steps are in the "
                          f"{segmenting.names['length']!r} counter)")
