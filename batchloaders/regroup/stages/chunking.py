"""Chunking: each example's sequences cut into chunks with context, the chunks batched."""
from __future__ import annotations

from batchloaders.core.limits import MAX_HELD_BYTES, gib
from batchloaders.core.model import LoaderConfig
from batchloaders.config import chunk_rules
from batchloaders.config.order import after_chunking
from batchloaders.regroup.stage import Build, SourcePlan, Stage, register, shown

BLOCK = 64  # examples chunked per tf.data call (a block's chunks are held in memory at once)


@register
class Chunking(Stage):
    name = "chunking"
    counted_as = "chunks"
    makes_examples = True
    schema = "chunking.schema.json"
    description = ("Chunking: each example's sequences cut into chunks of a fixed size with zero context at the "
                   "borders, each chunk an example. Defaults to none.")
    regroups = "makes each chunk an example of its own"
    keeps_file_order = True
    unmixable = "chunking cuts each sequence as one file gives it, before any mixing"
    fingerprinted = True

    def check(self, ctx, block: dict, *, alone: bool):
        return chunk_rules.chunk_spec(ctx, block, alone=alone, per_record=chunk_rules.per_record(ctx))

    def chunk_widths(self, spec) -> dict[str, int]:
        return {t.name: t.width for t in spec.tensors}

    def check_held(self, ctx, block: dict, per_example: int) -> None:
        if isinstance(block, dict) and block.get("shuffle_buffer"):
            held = block["shuffle_buffer"] * per_example
            if held > MAX_HELD_BYTES:
                ctx.check(("args", self.name, "shuffle_buffer"),
                          f"a chunk shuffle buffer of {block['shuffle_buffer']:,} chunks of at least {per_example:,} "
                          f"bytes would hold at least {gib(held)}: expected at most {gib(MAX_HELD_BYTES)}; lower "
                          "shuffle_buffer")

    def draws_at_random(self, spec) -> bool:
        return spec.shuffle_buffer is not None

    def source_plan(self, config: LoaderConfig, batch_size: int) -> SourcePlan:
        # Chunks are made from blocks of one epoch of examples: the stage repeats the epochs.
        return SourcePlan(BLOCK, drop_remainder=False, one_epoch=True)

    def counter(self, config: LoaderConfig):
        from batchloaders.regroup.chunking import ChunkCounter  # deferred: stages are described without TensorFlow

        return ChunkCounter()

    def apply(self, build: Build):
        from batchloaders.regroup import chunking  # deferred: stages are described without TensorFlow

        return chunking.apply(build)

    def padding_dataset(self, config: LoaderConfig, batch_size: int, names: list[str]):
        from batchloaders.regroup import chunking  # deferred: stages are described without TensorFlow

        return chunking.padding_dataset(config, batch_size, names)

    def lines(self, config: LoaderConfig) -> list[str]:
        """How each tensor is cut, what is copied, what is built on the chunks."""
        spec = config.chunking
        lines = [f"chunking: cores of {spec.size} steps every {spec.step}, context [{spec.left}, {spec.right}] (zeros "
                 f"at the borders), a last core shorter than {spec.min_size} dropped; chunks "
                 + (f"shuffled in a buffer of {spec.shuffle_buffer}" if spec.shuffle_buffer else "in order")
                 + "; target_batch_size counts chunks"]
        for t in spec.tensors:
            rate = "" if (t.size, t.step) == (spec.size, spec.step) else f" (size {t.size}, step {t.step})"
            lines.append(f"  chunked {t.name}: chunks of up to {t.width} steps, context [{t.left}, {t.right}]{rate}"
                         + (": fixes the number of chunks" if t.name == spec.reference else ""))
        for name in spec.copied:
            lines.append(f"  copied {name}: the same in every chunk of an example")
        for feature in after_chunking(config):
            lines.append(f"  built on the chunks: {feature.to_name} = {feature.type}: {shown(feature.info)}")
        return lines

    def as_json(self, config: LoaderConfig) -> dict:
        c = config.chunking
        return {"size": c.size, "step": c.step, "left": c.left, "right": c.right, "min_size": c.min_size,
                "shuffle_buffer": c.shuffle_buffer, "reference": c.reference, "copied": list(c.copied),
                "tensors": [{"name": t.name, "size": t.size, "step": t.step, "left": t.left,
                             "right": t.right, "width": t.width} for t in c.tensors]}
