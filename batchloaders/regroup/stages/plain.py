"""Plain batching: examples cut into batches as they come."""
from __future__ import annotations

from batchloaders.core.model import LoaderConfig
from batchloaders.regroup.stage import PLAIN, Build, Stage, register


@register
class Plain(Stage):
    name = PLAIN
    example_wise = True

    def batches(self, config: LoaderConfig, examples: int | None, batch_size: int) -> int | None:
        if examples is None:
            return None
        return examples // batch_size if config.drop_remainder else -(-examples // batch_size)

    def apply(self, build: Build):
        from batchloaders.loaders.base import finisher  # deferred: stages are described without TensorFlow
        from batchloaders.regroup.blocks import parallel  # deferred: stages are described without TensorFlow
        from batchloaders.transform.graphs import as_written, mapped  # deferred: described without TensorFlow

        ds, decode = build.source()
        if decode is None:  # the loader finished its blocks of examples itself
            return ds
        config = build.config
        finish = finisher(config, self.static_batch(config, build.batch_size), build.pack_inputs, build.pack_targets,
                          decode, build.zero_tails)
        return mapped(ds, as_written(finish), **parallel(config))
