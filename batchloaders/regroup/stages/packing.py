"""Packing: short examples concatenated best fit into rows of a fixed length."""
from __future__ import annotations

from batchloaders.spec.model import LoaderConfig
from batchloaders.read.block_sizes import regroup as block_of
from batchloaders.regroup.stage import Build, SourcePlan, Stage, register, shown


@register
class Packing(Stage):
    name = "packing"
    counted_as = "rows"

    def source_plan(self, config: LoaderConfig, batch_size: int) -> SourcePlan:
        return SourcePlan(block_of(config, batch_size), drop_remainder=False)

    def padded(self, config: LoaderConfig) -> list[str]:
        return [name for name in config.packing.tensors if name in config.outputs]

    def apply(self, build: Build):
        from batchloaders.regroup import packing  # deferred: stages are described without TensorFlow

        return packing.apply(build)

    def lines(self, config: LoaderConfig) -> list[str]:
        spec = config.packing
        split = 'long examples split into pieces' if spec.allow_split else 'an example longer than a row is an error'
        return [f"packing: {', '.join(spec.tensors)} packed best fit into rows of {spec.length} steps ({split}), "
                f"with {spec.segment_ids} ({shown(config.tensors.get(spec.segment_ids))}) and {spec.positions} "
                f"({shown(config.tensors.get(spec.positions))}), rows filled within blocks of "
                f"{block_of(config, config.target_batch_size)} examples; target_batch_size counts rows"]

    def as_json(self, config: LoaderConfig) -> dict:
        p = config.packing
        return {"length": p.length, "tensors": list(p.tensors), "segment_ids": p.segment_ids,
                "positions": p.positions, "allow_split": p.allow_split}
