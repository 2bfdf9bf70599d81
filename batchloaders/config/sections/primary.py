"""``args.primary_features``: manifest features read into tensors, typed by the loader."""
from __future__ import annotations

from batchloaders.errors import json_path, suggest
from batchloaders.spec.model import PrimaryFeature
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
        feature = manifest.features.get(p["from_name"])
        if feature is None:
            ctx.check(at + ("from_name",), f"feature {p['from_name']!r} is not in the manifest {manifest.path}"
                                           f"{suggest(p['from_name'], manifest.features)}; available: "
                                           f"{', '.join(manifest.features)}")
            continue
        ctx.primaries[p["to_name"]] = feature
        ctx.tensors[p["to_name"]] = primary_info(feature, ctx.loader_type, allow_var_len=manifest.allow_var_len,
                                                 window=window, report=ctx.check.at(at))
    ctx.claim_broken("primary_features")
