"""The regroup blocks, each checked by its registered stage (config/stage_rules.py) at the stage's phase.
Results go to ctx.regroup, keyed by block name.

A config has at most one regroup block: where two are given, the block of the stage registered later
reports the one registered earlier, once per pair.
"""
from __future__ import annotations

from batchloaders.config import stage_rules
from batchloaders.config.sections.context import SectionContext


def check_stages(ctx: SectionContext, phase: str) -> None:
    """Check the blocks of the stages that run at ``phase`` (one of stage_rules.PHASES), in registration order.

    Args:
        ctx: the config check so far; each checked block's spec (or None) goes to ``ctx.regroup[name]``.
        phase: which stages to check now.
    """
    registered = stage_rules.blocks()
    for index, stage in enumerate(registered):
        if stage.phase != phase or not ctx.given(stage.name):
            continue
        others = [other for other in registered[:index] if other.name in ctx.args]
        for other in others:
            ctx.check(("args", stage.name), stage.excluded(other))
        ctx.regroup[stage.name] = stage.check(ctx, ctx.args[stage.name], alone=not others)


def check_row_batching(ctx: SectionContext) -> None:
    """After the padding list: each checked stage's demands on its tensors' batching."""
    for stage in stage_rules.blocks():
        spec = ctx.regroup.get(stage.name)
        if spec is not None:
            stage.check_batching(ctx, spec)


def primary_extra(ctx: SectionContext) -> None:
    """Add to ``ctx.primary`` what the checked stage reads besides the config's primary features."""
    for stage in stage_rules.blocks():
        spec = ctx.regroup.get(stage.name)
        if spec is not None:
            ctx.primary.extend(stage.primary_extra(spec))
