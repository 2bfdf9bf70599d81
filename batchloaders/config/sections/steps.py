"""``args.processing_steps``: each step's tensor, type and what it makes of the tensor."""
from __future__ import annotations

from batchloaders.errors import json_path, suggest
from batchloaders.transform.registry import STEPS
from batchloaders.core.model import Step
from batchloaders.config.sections.context import SectionContext
from batchloaders.config.sections.secondary import infer, measured_by


def check_steps(ctx: SectionContext) -> None:
    """Then the deferred secondary features: each is built once the steps on what it measures have run."""
    all_steps = ctx.args.get("processing_steps", [])
    measured_late: dict[str, tuple] = {}  # to_name of a deferred feature -> where a step first used it
    for i, st in enumerate(all_steps if isinstance(all_steps, list) else []):
        at = ("args", "processing_steps", i)
        if not ctx.valid(at):
            _broken_step(ctx, st, at)
            continue
        name = st["tensor"]
        if name in ctx.deferred:  # a step on a deferred feature: build it now, from what the steps so far left
            measured_late[name] = at
            infer(ctx, *ctx.deferred.pop(name))
        for feature, first_use in measured_late.items():
            if measured_by(ctx.secondary, feature) == name:
                ctx.check(at + ("tensor",), f"this step changes tensor {name!r} after a step on {feature!r} "
                                            f"({json_path(first_use)}), which measures {name!r} once its steps have "
                                            f"run: expected every step on {name!r} before the first step on "
                                            f"{feature!r}")
        _check_step(ctx, st, at)
    for pending in list(ctx.deferred.values()):
        infer(ctx, *pending)


def _broken_step(ctx: SectionContext, st, at: tuple) -> None:
    """A broken step, or one of a plugin type not imported, leaves its tensor unknown: nothing
    can say what it would become. The tensor it names must exist all the same."""
    if isinstance(st, dict) and isinstance(st.get("tensor"), str):
        if at + ("type",) in ctx.unchecked and st["tensor"] not in ctx.seen and ctx.valid(at + ("tensor",)):
            ctx.check(at + ("tensor",), f"tensor {st['tensor']!r} is not a primary or secondary feature"
                                        f"{suggest(st['tensor'], ctx.seen)}; expected one of: {', '.join(ctx.seen)}")
        ctx.tensors.pop(st["tensor"], None)


def _check_step(ctx: SectionContext, st: dict, at: tuple) -> None:
    kind, name, step_args = STEPS.get(st["type"], ctx.scopes), st["tensor"], dict(st.get("args", {}))
    info_in = ctx.tensors.get(name)
    output = None
    if name not in ctx.seen:
        ctx.check(at + ("tensor",), f"tensor {name!r} is not a primary or secondary feature"
                                    f"{suggest(name, ctx.seen)}; expected one of: {', '.join(ctx.seen)}")
    elif kind is None:
        ctx.check(at + ("type",), f"unknown processing step type {st['type']!r}"
                                  f"{suggest(st['type'], STEPS.names(ctx.scopes))}")
    elif ctx.loader_type not in kind.loaders:
        ctx.check(at + ("type",), f"processing step type {st['type']!r} is not available for the "
                                  f"{ctx.loader_type} loader: expected one of {', '.join(kind.loaders)} loaders")
    elif name in ctx.tensors:
        output = kind.infer(step_args, ctx.tensors[name], ctx.type_context(at))
        if output is None:
            del ctx.tensors[name]  # already reported; keep later checks quiet about it
        else:
            ctx.tensors[name] = output
    ctx.steps.append(Step(name, st["type"], step_args, json_path(at), info_in, output))
