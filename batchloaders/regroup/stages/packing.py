"""Packing: short examples concatenated best fit into rows of a fixed length."""
from __future__ import annotations

from batchloaders.core.model import LoaderConfig
from batchloaders.config import pack_rules
from batchloaders.config.stage_rules import BEFORE_MODEL
from batchloaders.read.block_sizes import regroup as block_of
from batchloaders.regroup.stage import Build, ShownPadding, SourcePlan, Stage, register, shown


def _rate(real: int, padded: int) -> str:
    return f"{real / padded if padded else float('nan'):.4f} ({real} / {padded})"


@register
class Packing(Stage):
    name = "packing"
    counted_as = "rows"
    phase = BEFORE_MODEL  # it makes segment ids and positions, which the model may name
    schema = "packing.schema.json"
    description = ("Packing: short examples concatenated into rows of a fixed length, with segment ids and "
                   "positions. Defaults to none.")
    regroups = "fills rows of a fixed length"
    fingerprinted = True

    def check(self, ctx, block: dict, *, alone: bool):
        return pack_rules.pack_spec(ctx, block, alone=alone)

    def check_batching(self, ctx, spec) -> None:
        pack_rules.check_batching(ctx, spec)

    def source_plan(self, config: LoaderConfig, batch_size: int) -> SourcePlan:
        return SourcePlan(block_of(config, batch_size), drop_remainder=False)

    def padded(self, config: LoaderConfig) -> list[str]:
        return [name for name in config.packing.tensors if name in config.outputs]

    def apply(self, build: Build):
        from batchloaders.regroup import packing  # deferred: stages are described without TensorFlow

        return packing.apply(build)

    def bench_lines(self, config: LoaderConfig, batch_size: int, batches: int) -> list[str]:
        from batchloaders.regroup import packing  # deferred: stages are described without TensorFlow

        packed = packing.packed_counts(config, batch_size, batches)
        return [f"packing efficiency (real steps / steps of the packed rows, over the {packed['rows']:,} rows "
                "of the first whole blocks packed; real = steps a segment id marks):"] + [
            f"  {name}: {_rate(packed['real'][name], packed['padded'][name])}" for name in config.packing.tensors]

    def shown_padding(self, config: LoaderConfig, shown: list[dict]) -> ShownPadding:
        from batchloaders.regroup import packing  # deferred: stages are described without TensorFlow

        ids = [g.segment_ids for g in config.packing.packed_groups if g.segment_ids not in config.outputs]
        return ShownPadding(packing.shown_counts(config, shown, self.padded(config)),
                            "the padding where segment_ids is 0",
                            f"padding fraction: not measured (packing marks padding in {', '.join(map(repr, ids))}, "
                            "which the model does not take)")

    def lines(self, config: LoaderConfig) -> list[str]:
        spec = config.packing
        block = f"rows filled within blocks of {block_of(config, config.target_batch_size)} examples"
        if spec.groups:
            return [f"packing: each example whole into a row where every group fits (best fit, an example longer "
                    f"than its group's row is an error), {block}; target_batch_size counts rows:"] + [
                f"  {', '.join(g.tensors)}: rows of {g.length} steps, with {self._made(config, g)}"
                for g in spec.groups]
        split = 'long examples split into pieces' if spec.allow_split else 'an example longer than a row is an error'
        return [f"packing: {', '.join(spec.tensors)} packed best fit into rows of {spec.length} steps ({split}), "
                f"with {self._made(config, spec.packed_groups[0])}, {block}; target_batch_size counts rows"]

    @staticmethod
    def _made(config: LoaderConfig, group) -> str:
        return (f"{group.segment_ids} ({shown(config.tensors.get(group.segment_ids))}) and {group.positions} "
                f"({shown(config.tensors.get(group.positions))})")

    def as_json(self, config: LoaderConfig) -> dict:
        p = config.packing
        if p.groups:  # (no length or segment tensors of the whole block: each group has its own)
            return {"tensors": list(p.tensors), "allow_split": p.allow_split,
                    "groups": [{"tensors": list(g.tensors), "length": g.length, "segment_ids": g.segment_ids,
                                "positions": g.positions} for g in p.groups]}
        return {"length": p.length, "tensors": list(p.tensors), "segment_ids": p.segment_ids,
                "positions": p.positions, "allow_split": p.allow_split}
