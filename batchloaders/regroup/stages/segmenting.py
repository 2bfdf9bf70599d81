"""Segmenting (truncated BPTT): sequences cut into segments of num_unroll steps, batched in lanes."""
from __future__ import annotations

from batchloaders.core.model import LoaderConfig
from batchloaders.config import segment_rules
from batchloaders.regroup.stage import Build, ShownPadding, SourcePlan, Stage, register, shown

BLOCK = 64  # sequences cut per tf.data call (a block's segments are held in memory at once)


@register
class Segmenting(Stage):
    name = "segmenting"
    counted_as = "segment batches"
    schema = "segmenting.schema.json"
    description = ("Segmenting: sequences cut into segments of num_unroll steps and batched in lanes, so that a "
                   "recurrent model carries its state from one segment of a sequence to the next (truncated "
                   "backpropagation through time). Defaults to none.")
    regroups = "batches consecutive segments of each sequence in a fixed slot"
    file_unshardable = True  # its lanes hide the files from TensorFlow's file sharding
    keeps_file_order = True
    unmixable = "segmenting groups consecutive records by key within one file, which mixing interleaves"
    fingerprinted = True
    xla_compilable = False  # XLA takes no strings: the segment counters carry the string key

    def check(self, ctx, block: dict, *, alone: bool):
        return segment_rules.segment_spec(ctx, block, alone=alone)

    def unfed(self, block: dict) -> tuple[str, ...]:
        # The key is read to name the sequences, not to feed the model.
        return (block["key"],) if "key" in block else ()

    def check_batching(self, ctx, spec) -> None:
        segment_rules.check_batching(ctx, spec)

    def primary_extra(self, spec) -> tuple:
        return segment_rules.key_feature(spec)

    def source_plan(self, config: LoaderConfig, batch_size: int) -> SourcePlan:
        # Segments are made from blocks of one epoch of examples: the stage repeats the epochs.
        return SourcePlan(BLOCK, drop_remainder=False, one_epoch=True)

    def static_batch(self, config: LoaderConfig, batch_size: int) -> int | None:
        return None if config.segmenting.allow_small_batch else batch_size  # lanes of padding fill the end

    def counters(self, config: LoaderConfig) -> tuple[str, ...]:
        return tuple(config.segmenting.names.values())

    def padded(self, config: LoaderConfig) -> list[str]:
        return [name for name in config.segmenting.tensors if name in config.outputs]

    def counter(self, config: LoaderConfig):
        from batchloaders.regroup.segmenting import SegmentCounter  # deferred: stages are described without TF

        return SegmentCounter()

    def apply(self, build: Build):
        from batchloaders.regroup import segmenting  # deferred: stages are described without TensorFlow

        return segmenting.apply(build)

    def shown_padding(self, config: LoaderConfig, shown: list[dict]) -> ShownPadding:
        from batchloaders.regroup import segmenting  # deferred: stages are described without TensorFlow

        return ShownPadding(segmenting.shown_counts(config, shown, self.padded(config)),
                            "the real steps from each segment's length counter")

    def drawn_lengths(self, config: LoaderConfig, shown: list[dict]):
        # A segment's real steps are its length counter; its width num_unroll.
        spec = config.segmenting
        name = next((n for n in spec.tensors if n in config.outputs), None)
        drawn = ([t[spec.names["length"]].numpy() for t in shown], [spec.num_unroll] * len(shown)) if name else None
        return name, drawn

    def lines(self, config: LoaderConfig) -> list[str]:
        """How sequences become segments in lanes, and the counters the features gain."""
        spec = config.segmenting
        lanes = spec.lanes or config.target_batch_size
        end = ("dropped (smaller batches)" if spec.allow_small_batch
               else "filled with zero-length padding segments (every batch has all lanes)")
        key = (f"key from {spec.key_from_manifest or spec.key}, unique per epoch" if spec.key is not None
               else "key '<file path>:<record index>' of each sequence's (first) record")
        return [f"segmenting: sequences cut into segments of {spec.num_unroll} steps "
                + ("(the last one padded)" if spec.pad else "(lengths must be multiples)")
                + f" in {lanes} lanes, each lane taking the next waiting sequence when its own ends; at the end of "
                f"the data the lanes with no work left are {end}; {key}",
                "  segmented: " + ", ".join(f"{name} {shown(config.tensors.get(name))}" for name in spec.tensors),
                *(f"  copied {name}: the same in every segment of a sequence" for name in spec.context),
                "  counters in the features: "
                + ", ".join(f"{name} {shown(config.tensors.get(name))}" for name in spec.names.values())]

    def as_json(self, config: LoaderConfig) -> dict:
        g = config.segmenting
        tensor = lambda info: {"dtype": info.dtype, "shape": list(info.shape)}  # noqa: E731
        return {"num_unroll": g.num_unroll, "lanes": g.lanes or config.target_batch_size,
                "pad": g.pad, "allow_small_batch": g.allow_small_batch, "tensors": list(g.tensors),
                "context": list(g.context), "key": g.key_from_manifest or g.key,
                "counters": {c: {"name": n, **tensor(config.tensors[n])} for c, n in g.names.items()}}
