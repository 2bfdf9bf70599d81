"""The last checks, once the config is otherwise sound: memory (config/resources.py) and the manifest's
record counts (config/accounting.py)."""
from __future__ import annotations

from batchloaders.config import accounting
from batchloaders.config.resources import check_resources
from batchloaders.config.sections.context import SectionContext


def check_memory_and_counts(ctx: SectionContext) -> None:
    if not ctx.check.problems and not ctx.unchecked:  # (the memory of a tensor a plugin makes is unknown)
        check_resources(ctx)
    if not ctx.check.problems:  # the manifest's record counts, when it lists the files
        # (every source of a mixture: the first stands in ctx.dataset)
        for dataset in [ctx.dataset] + [source.dataset for source in ctx.sources[1:]]:
            ctx.check.problems.extend(accounting.size_problems(dataset))
            ctx.check.problems.extend(accounting.missing_problems(dataset))
        accounting.empty_output_problems(ctx.args, ctx.loader_type, ctx.dataset, ctx.check)
