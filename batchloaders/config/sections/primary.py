"""``args.primary_features``: manifest features read into tensors, typed by the loader."""
from __future__ import annotations

from batchloaders.errors import json_path, suggest
from batchloaders.core.model import PrimaryFeature
from batchloaders.config.sections.context import SectionContext
from batchloaders.config.sections.loader import fixed_window, primary_info


def check_primary(ctx: SectionContext) -> None:
    manifest = ctx.manifest
    window = fixed_window(ctx.loader_type, ctx.value("min_window"), ctx.value("max_window"))
    for i, p in ctx.items("primary_features"):
        at = ("args", "primary_features", i)
        ctx.claim(p["to_name"], at)
        ctx.primary.append(PrimaryFeature(p["from_name"], p["to_name"], json_path(at)))
        if manifest is None:
            continue
        feature = manifest_feature(ctx, manifest, p["from_name"], at)
        if feature is None:
            continue
        ctx.primaries[p["to_name"]] = feature
        ctx.tensors[p["to_name"]] = primary_info(feature, ctx.loader_type, allow_var_len=manifest.allow_var_len,
                                                 window=window, report=ctx.check.at(at))
    ctx.claim_broken("primary_features")


def manifest_feature(ctx: SectionContext, manifest, from_name: str, at: tuple):
    """The manifest's feature ``from_name``, or None after reporting at ``at`` that the manifest has none."""
    feature = manifest.features.get(from_name)
    if feature is None:
        ctx.check(at + ("from_name",), f"feature {from_name!r} is not in the manifest {manifest.path}"
                                       f"{suggest(from_name, manifest.features)}; available: "
                                       f"{', '.join(manifest.features)}")
    return feature
