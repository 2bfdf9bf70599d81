"""``args.secondary_features``: tensors made from the primary ones by registered types."""
from __future__ import annotations

import dataclasses

from batchloaders.errors import json_path, suggest
from batchloaders.transform.registry import SECONDARY
from batchloaders.core.model import SecondaryFeature
from batchloaders.config.sections.context import SectionContext
from batchloaders.config.stage_rules import given


def claim_names(ctx: SectionContext) -> None:
    """Without a manifest no tensor can be typed: only the names are claimed."""
    for i, s in ctx.items("secondary_features"):
        ctx.claim(s["to_name"], ("args", "secondary_features", i))
    ctx.claim_broken("secondary_features")


def check_secondary(ctx: SectionContext) -> None:
    """A feature that ``measures`` a tensor (e.g. length) sees it as the processing steps leave it: it
    waits in ctx.deferred for the steps section."""
    for i, s in ctx.items("secondary_features"):
        at = ("args", "secondary_features", i)
        ctx.claim(s["to_name"], at)
        kind = SECONDARY.get(s["type"], ctx.scopes)
        item_args = dict(s.get("args", {}))
        ctx.secondary.append(SecondaryFeature(s["to_name"], s["type"], item_args, json_path(at), None))
        if _available(ctx, kind, s["type"], at):
            if kind.measures:
                ctx.deferred[s["to_name"]] = (len(ctx.secondary) - 1, at, kind, item_args)
            else:
                infer(ctx, len(ctx.secondary) - 1, at, kind, item_args)
    ctx.claim_broken("secondary_features")


def _available(ctx: SectionContext, kind, name: str, at: tuple) -> bool:
    """The type is registered, serves this loader, and has what it describes; else reported."""
    if kind is None:  # the schema lists the types, so this means schema and registry disagree
        ctx.check(at + ("type",), f"unknown secondary feature type {name!r}"
                                  f"{suggest(name, SECONDARY.names(ctx.scopes))}")
    elif ctx.loader_type not in kind.loaders:
        ctx.check(at + ("type",), f"secondary feature type {name!r} is not available for the {ctx.loader_type} "
                                  f"loader: expected one of {', '.join(kind.loaders)} loaders")
    elif kind.after_chunking and not given(ctx.args, "makes_examples"):
        ctx.check(at + ("type",), f"secondary feature type {name!r} describes a chunk, and there are no chunks: "
                                  "expected a chunking block in args (chunk metadata exists only once examples are "
                                  "cut into chunks)")
    else:
        return True
    return False


def infer(ctx: SectionContext, index: int, at: tuple, kind, item_args: dict) -> None:
    """Type the secondary feature at ``index`` from the tensors as they are now."""
    info = kind.infer(item_args, ctx.type_context(at))
    if info is not None:
        ctx.tensors[ctx.secondary[index].to_name] = info
    ctx.secondary[index] = dataclasses.replace(ctx.secondary[index], info=info)


def measured_by(secondary, to_name: str) -> str | None:
    """The tensor a deferred secondary feature (``measures``) named ``to_name`` measures."""
    for feature in secondary:
        if feature.to_name == to_name:
            kind = SECONDARY.get(feature.type)
            return feature.args.get(kind.measures) if kind is not None and kind.measures else None
    return None
