"""The loader's own args, and what each loader type means for the rest of the check (through its
kind, config/kinds.py, as every module outside the loaders asks)."""
from __future__ import annotations

from batchloaders.config.kinds import kind
from batchloaders.core.model import TensorInfo, WindowSpec
from batchloaders.config.sections.context import SectionContext


def is_sequence(loader_type: str) -> bool:
    """Examples are windows of several records (or steps), sized by min_window and max_window."""
    return kind(loader_type).sequence


def concatenates_records(loader_type: str) -> bool:
    """Records are concatenated along their first axis into one time axis (continuous_sequence): a
    window's first axis counts steps, whatever the feature."""
    return kind(loader_type).concatenates_records


def stacks_record_rows(loader_type: str) -> bool:
    """A window stacks one row per record for each context feature (discrete_sequence): those tensors'
    first axis counts records, not steps."""
    return kind(loader_type).stacks_record_rows


def window_unit(loader_type: str) -> str:
    """What a window's length counts."""
    return "records" if stacks_record_rows(loader_type) else "steps"


def fixed_window(loader_type: str, lo, hi) -> int | None:
    """The window size when a sequence loader's min_window == max_window, else None."""
    return lo if is_sequence(loader_type) and lo is not None and lo == hi else None


def primary_info(feature, loader_type: str, *, allow_var_len: bool, window: int | None, report) -> TensorInfo:
    """Per-example shape of a primary feature once the loader has assembled an example or window.

    ``window``: see :func:`fixed_window`.
    """
    shape = tuple(feature.shape)
    if not is_sequence(loader_type):
        if feature.var_len:
            return TensorInfo(feature.dtype, (None,) + shape)
        return TensorInfo(feature.dtype, feature.record_shape)
    # Sequence loaders put a window axis first. Whole-record tensors are concatenated along
    # their first axis (continuous, and discrete feature lists) or stacked one row per record
    # (discrete context features).
    if stacks_record_rows(loader_type):
        if feature.var_len:  # the records of a window hold different numbers of steps
            return TensorInfo(feature.dtype, (None,) + shape)
        return TensorInfo(feature.dtype, (window,) + feature.record_shape)
    if feature.var_len:
        return TensorInfo(feature.dtype, (window,) + shape)
    if feature.raw_len > 1:
        return TensorInfo(feature.dtype, (window,) + shape)  # the raw strings are the time axis
    if allow_var_len:
        report(("from_name",), f"feature {feature.name!r} is a context feature (var_len false): the "
                               "continuous_sequence loader concatenates records along time, so it needs "
                               "feature lists (var_len true) when records are SequenceExamples")
    if not shape:
        report(("from_name",), f"feature {feature.name!r} is a scalar per record: the continuous_sequence "
                               "loader needs at least one axis to concatenate records along")
        return TensorInfo(feature.dtype, (window,))
    return TensorInfo(feature.dtype, (window,) + shape[1:])


def window_spec(ctx: SectionContext) -> WindowSpec | None:
    """The loader's windows, as its kind says it has them.

    Args:
        ctx: the checked config's context (its args passed the schema).

    Returns:
        A WindowSpec for a kind with windows (``stride`` only where it concatenates records), else None.
    """
    loader = kind(ctx.loader_type)
    if not loader.sequence:
        return None
    return WindowSpec(ctx.args["min_window"], ctx.args["max_window"],
                      ctx.args.get("stride") if loader.concatenates_records else None)


# The args the loader rules read: they run only when all of these passed the schema.
_RULE_KEYS = ("min_window", "max_window", "multi_load", "primary_features", "padding", "secondary_features",
              "processing_steps")


def check_loader_args(ctx: SectionContext) -> None:
    """multi_load, the window sizes, and what the loader type needs of the features and padding.
    (shuffle's required arguments are a schema rule: common_args.schema.json)"""
    if not all(ctx.valid(("args", key)) for key in _RULE_KEYS):
        return
    _check_multi_load(ctx)
    sequence = is_sequence(ctx.loader_type)
    lo, hi = (ctx.args["min_window"], ctx.args["max_window"]) if sequence else (None, None)
    if sequence and lo > hi:
        ctx.check(("args", "min_window"), f"found min_window {lo} > max_window {hi}: expected min_window <= "
                                          "max_window")
    if concatenates_records(ctx.loader_type) and not ctx.manifest.allow_var_len:
        _check_steps_per_record(ctx)
    if not ctx.padding and not (sequence and lo > hi):  # (no window size to pad to yet)
        _check_batchable(ctx, lo, hi)


def _check_multi_load(ctx: SectionContext) -> None:
    if not ctx.args.get("multi_load", False):
        return
    varying = ctx.manifest.allow_var_len or any(f.var_len for f in ctx.manifest.features.values())
    why = [w for w, bad in (("records are variable length (allow_var_len is true, or a feature's shape begins "
                             "with null)", varying),
                            ("secondary_features are given", bool(ctx.secondary)),
                            ("processing_steps are given", bool(ctx.steps)),
                            ("padding is enabled", ctx.padding)) if bad]
    if why:
        ctx.check(("args", "multi_load"), "multi_load must be false when " + " and ".join(why)
                                          + " (the compiler parses in batches on its own whenever that gives "
                                            "identical results, so multi_load is not needed for speed)")


def _check_steps_per_record(ctx: SectionContext) -> None:
    """Example records are concatenated along their first axis, which the manifest fixes: every
    selected feature needs the same length there, and fixed ones cannot go with variable-length ones."""
    first = None
    selected = [(i, ctx.manifest.features.get(p["from_name"])) for i, p in enumerate(ctx.args["primary_features"])]
    varying = next((f.name for _, f in selected if f is not None and f.var_len), None)
    for i, feature in selected:
        steps = feature.steps_per_record if feature is not None else None
        if steps is not None and varying is not None:
            ctx.check(("args", "primary_features", i, "from_name"),
                      f"feature {feature.name!r} has {steps} steps per record along its first axis but {varying!r} "
                      "a variable number (its shape begins with null): the continuous_sequence loader concatenates "
                      "records along that axis, so every selected feature needs the same length per record")
        if steps is None or varying is not None:
            continue  # unknown or scalar features are reported elsewhere
        if first is None:
            first = (feature.name, steps)
        elif steps != first[1]:
            ctx.check(("args", "primary_features", i, "from_name"),
                      f"feature {feature.name!r} has {steps} steps per record along its first axis but "
                      f"{first[0]!r} has {first[1]}: the continuous_sequence loader concatenates records along "
                      "that axis, so every selected feature needs the same length per record")


def _check_batchable(ctx: SectionContext, lo, hi) -> None:
    """Without padding, every tensor needs one length per batch."""
    variable = [name for name, info in ctx.tensors.items() if None in info.shape]
    if is_sequence(ctx.loader_type) and lo < hi and variable:
        ctx.check(("args", "padding"), f"min_window {lo} != max_window {hi}: windows of different lengths "
                                       f"({lo}..{hi} {window_unit(ctx.loader_type)}) cannot be stacked into a batch "
                                       f"without padding (tensors {', '.join(map(repr, variable))}): enable padding "
                                       "(padding true or a padding list) or fix the window length (min_window equal "
                                       "to max_window)")
        # Feature lists of discrete windows vary even with a fixed window size: say so too.
        features = ctx.manifest.features
        lists = {p["to_name"] for p in ctx.args["primary_features"]
                 if p["from_name"] in features and features[p["from_name"]].var_len}
        variable = [name for name in variable if stacks_record_rows(ctx.loader_type) and name in lists]
    for name in variable:
        info = ctx.tensors[name]
        ctx.check(("args", "padding"), f"tensor {name!r} has a variable length axis (shape "
                                       f"{['?' if d is None else d for d in info.shape]}) and cannot be batched "
                                       "without padding: expected padding true (or a padding list), or a fixed length")
