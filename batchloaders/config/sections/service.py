"""``args.service``: running the pipeline on a tf.data service (rules in config/service_rules.py)."""
from __future__ import annotations

from batchloaders.config.service_rules import service_spec
from batchloaders.config.sections.context import SectionContext


def check_service(ctx: SectionContext) -> None:
    if ctx.given("service"):
        ctx.service = service_spec(ctx.args["service"], ctx.value("epochs"), ctx.check, ctx.loader_type, ctx.args)
