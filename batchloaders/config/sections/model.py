"""The ``model`` block (or the names given in code): which tensors the model takes and which it predicts."""
from __future__ import annotations

from batchloaders.errors import suggest
from batchloaders.config.sections.context import SectionContext


def check_model(ctx: SectionContext) -> None:
    """Fills ctx.inputs, targets and wanted; with no model block every feature the config makes is an
    input (a model given in code names them)."""
    data, args = ctx.data, ctx.args
    if ctx.model_names is not None:
        ctx.inputs, ctx.targets = (tuple(n) for n in ctx.model_names)
    elif "model" in data and ctx.valid(("model",)):
        ctx.inputs, ctx.targets = tuple(data["model"].get("inputs", ())), tuple(data["model"].get("targets", ()))
    elif "model" in data:
        ctx.model_known = False  # reported by the schema; unknown names check nothing
    else:
        made = [e.get("to_name") for key in ("primary_features", "secondary_features")
                for e in (args.get(key) if isinstance(args.get(key), list) else ()) if isinstance(e, dict)]
        ctx.inputs = tuple(dict.fromkeys(n for n in made if isinstance(n, str) and n))
        ctx.model_assumed = True
    if ctx.model_known and ctx.model_declared and not ctx.inputs:
        where = ("model",) if ctx.model_names is None else ("model", "inputs")
        ctx.check(where, "found no model input: expected at least one to_name in model.inputs")
    for name in set(ctx.inputs) & set(ctx.targets):
        ctx.check(("model", "targets"), f"{name!r} is both a model input and a model target: expected each once")
    ctx.wanted = set(ctx.inputs) | set(ctx.targets)


def check_produced(ctx: SectionContext) -> None:
    """Every model input and target must be produced by a primary or secondary feature (unless a broken
    entry, whose to_name is unknown, may produce it)."""
    if not ctx.model_known or ctx.unnamed:
        return
    for name in ctx.model_tensors:
        if name not in ctx.seen:
            where = ("model", "inputs" if name in ctx.inputs else "targets")
            ctx.check(where, f"model tensor {name!r} is not produced by any primary or secondary feature"
                             f"{suggest(name, ctx.seen)}; produced: {', '.join(ctx.seen) or 'nothing'}")
