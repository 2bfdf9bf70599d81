"""Length bucketing: examples grouped by the length of one tensor, each bucket with its batch size."""
from __future__ import annotations

import dataclasses

from batchloaders.errors import ConfigError, Problem

from batchloaders.core.model import LoaderConfig
from batchloaders.config import bucket_rules
from batchloaders.config.stage_rules import AFTER_PADDING
from batchloaders.read.block_sizes import regroup as block_of
from batchloaders.regroup.stage import Build, SourcePlan, Stage, register


@register
class Bucketing(Stage):
    name = "bucketing"
    counted_as = "buckets"
    phase = AFTER_PADDING  # bucket boundaries pad tensors, which must agree with their padding
    schema = "bucketing.schema.json"
    description = ("Length bucketing: batches of examples of similar length, per-bucket batch sizes or a token "
                   "budget. Defaults to none.")
    regroups = "batches examples of similar length"
    file_unshardable = True  # its last-block flush hides the files from TensorFlow's file sharding
    fingerprinted = True

    def check(self, ctx, block: dict, *, alone: bool):
        bounds = bucket_rules.window_bounds(ctx.loader_type, ctx.args.get("max_window"), ctx.primaries, ctx.steps)
        return bucket_rules.bucket_spec(ctx, block, bounds=bounds)

    def per_replica(self, config: LoaderConfig, replicas: int) -> LoaderConfig:
        """``config`` with each bucket's batch size split among the replicas in sync, as the global batch is;
        ConfigError when a ``batch_sizes`` entry does not split evenly. Budgets (``max_tokens``) are split
        rounding down (at least 1 example), so that the global batch stays within the budget."""
        spec = config.bucketing
        if replicas <= 1:
            return config
        if spec.max_tokens is None:
            for k, size in enumerate(spec.batch_sizes):
                if size % replicas:
                    raise ConfigError(Problem(config.source, f"{spec.json_path}.batch_sizes[{k}]", (
                        f"found {size}: under tf.distribute every bucket's batch is split evenly among the "
                        f"{replicas} replicas in sync, and {size} is not a multiple of {replicas}; expected "
                        f"multiples of {replicas}")))
        sizes = tuple(max(1, size // replicas) for size in spec.batch_sizes)
        return dataclasses.replace(config, regroup=dataclasses.replace(spec, batch_sizes=sizes))

    def source_plan(self, config: LoaderConfig, batch_size: int) -> SourcePlan:
        # The loader's blocks are large enough that the examples waiting in the buckets are copied once per
        # many examples, not per batch; none is dropped before the buckets see it.
        return SourcePlan(block_of(config, batch_size), drop_remainder=False)

    def static_batch(self, config: LoaderConfig, batch_size: int) -> int | None:
        return None  # each bucket has its batch size

    def apply(self, build: Build):
        from batchloaders.regroup import bucketing  # deferred: stages are described without TensorFlow

        return bucketing.apply(build)

    def padding_dataset(self, config: LoaderConfig, batch_size: int, names: list[str]):
        from batchloaders.regroup import bucketing  # deferred: stages are described without TensorFlow

        return bucketing.padding_dataset(config, batch_size, names)

    def batch_shapes(self, config: LoaderConfig, outputs: list) -> tuple[list | None, str]:
        """One shape per bucket when every batch is full (drop_remainder true, or epochs null) and every length
        is fixed by padding or, for pad_to_boundary tensors below the last bucket, by the bucket's boundary."""
        spec = config.bucketing
        if not (config.drop_remainder or config.epochs is None):
            return None, "bucketing with drop_remainder false: each bucket's last batch holds what is left"
        shapes = []
        for bucket, size in enumerate(spec.batch_sizes):
            shape = []
            for o in outputs:
                dims = list(o.shape[1:])
                if dims and dims[0] is None and o.name in spec.pad_to_boundary and spec.admits(bucket) is not None:
                    dims[0] = spec.admits(bucket)
                varying = next((axis for axis, d in enumerate(dims, 1) if d is None), None)
                if varying is not None:
                    last = " in the last bucket" if o.name in spec.pad_to_boundary else ""
                    return None, f"{o.name} axis {varying} is padded to each batch's longest{last}"
                shape.append((o.name, (size, *dims)))
            shapes.append(tuple(shape))
        return shapes, f"one per bucket ({len(spec.batch_sizes)} buckets)"

    def lines(self, config: LoaderConfig) -> list[str]:
        spec = config.bucketing
        spans = [f"[{lo}, {hi})" for lo, hi in zip((0,) + spec.boundaries, spec.boundaries)]
        shown = spans + [f"{spec.boundaries[-1]}+"]
        sizes = ", ".join(f"{span}: {size}" for span, size in zip(shown, spec.batch_sizes))
        how = (f"batch size x longest length a bucket admits <= max_tokens {spec.max_tokens}" if spec.max_tokens
               else "batch_sizes as given")
        pad = (f"; {', '.join(spec.pad_to_boundary)} padded to the bucket's boundary" if spec.pad_to_boundary else "")
        return [f"bucketing: by the length of {spec.by}, {len(spec.batch_sizes)} buckets ({how}); "
                f"length: batch size = {sizes}{pad}; blocks of {block_of(config, config.target_batch_size)} examples "
                "are read and transformed together before they are regrouped; batches per epoch are not known in "
                "advance"]

    def as_json(self, config: LoaderConfig) -> dict:
        b = config.bucketing
        return {"by": b.by, "boundaries": list(b.boundaries), "batch_sizes": list(b.batch_sizes),
                "max_tokens": b.max_tokens, "pad_to_boundary": list(b.pad_to_boundary)}
