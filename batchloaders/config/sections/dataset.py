"""``args.dataset``: the dataset and its manifest, which every from_name is checked against."""
from __future__ import annotations

from batchloaders.errors import BatchLoaderError
from batchloaders.config import datasets
from batchloaders.config.sections.context import SectionContext


def check_dataset(ctx: SectionContext) -> None:
    """When the dataset cannot be found, its problems are reported and the checks that need no
    manifest still run and report too."""
    if "dataset" in ctx.args and ctx.valid(("args", "dataset")):
        try:
            ctx.dataset = datasets.resolve(ctx.args["dataset"], ctx.doc)
        except BatchLoaderError as error:
            ctx.check.problems.extend(error.problems)
    ctx.manifest = ctx.dataset.manifest if ctx.dataset is not None else None
