"""``make demo``: generate the example datasets, validate every config, build each
loader, print its output signature and throughput, and fit a tiny Keras model on it.

Run with ``python -m batchloaders.demo``.
"""
from __future__ import annotations

import glob
import os
import time

from batchloaders.cli.main import validate
from batchloaders.regroup import stage as stages
from batchloaders.runtime.quiet import import_tensorflow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _chars_model(keras, classes=256):
    context = keras.Input((16,), dtype="int32", name="context")
    x = keras.layers.Embedding(256, 16)(context)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(128, activation="relu")(x)
    return keras.Model({"context": context}, {"next_char": keras.layers.Dense(classes, name="next_char")(x)})


def _stream_model(keras):
    text = keras.Input((None,), dtype="int32", name="text")
    x = keras.layers.Embedding(256, 32)(text)
    x = keras.layers.GRU(64, return_sequences=True)(x)
    return keras.Model({"text": text}, {"next_text": keras.layers.Dense(256, name="next_text")(x)})


def _sentences_model(keras):
    chars = keras.Input((None,), dtype="int32", name="chars")
    ids = keras.Input((None,), dtype="int32", name="sentence_ids")
    x = keras.layers.Embedding(256, 32)(chars)
    s = keras.layers.Embedding(8, 4)(keras.ops.clip(ids + 1, 0, 7))  # -1 pads -> 0
    x = keras.layers.GRU(64, return_sequences=True)(keras.layers.Concatenate()([x, s]))
    return keras.Model({"chars": chars, "sentence_ids": ids}, {"next_chars": keras.layers.Dense(256, name="next_chars")(x)})


def _chunked_model(keras):
    chars = keras.Input((72,), dtype="int32", name="chars")  # 8 + 64: a chunk with its left context
    chunk = keras.Input((), dtype="int32", name="chunk")
    x = keras.layers.Embedding(256, 32)(chars)
    x = keras.layers.Conv1D(64, 9, padding="valid", activation="relu")(x)  # 72 - 8 = 64: one per core character
    where = keras.layers.Embedding(8, 8)(keras.ops.minimum(chunk, 7))  # the chunk's place in its window
    x = keras.layers.Concatenate()([x, keras.ops.repeat(keras.ops.expand_dims(where, 1), 64, axis=1)])
    return keras.Model({"chars": chars, "chunk": chunk}, {"next_chars": keras.layers.Dense(256, name="next_chars")(x)})


def _segmented_model(keras):
    """A GRU that carries its state from each segment of a window to the next (truncated BPTT)."""
    import tensorflow as tf

    from batchloaders import StateSaver  # deferred: imports TensorFlow, after main's quiet import

    class Segmented(keras.Model):
        def __init__(self):
            super().__init__()
            self.embed = keras.layers.Embedding(256, 32)
            self.gru = keras.layers.GRU(64, return_sequences=True, return_state=True)
            self.head = keras.layers.Dense(256)
            self.states = StateSaver({"h": tf.zeros([64])}, 16)

        def call(self, features):  # chars and the counters; the other counters are not needed
            mask = tf.sequence_mask(features["length"], 32)
            out, h = self.gru(self.embed(features["chars"]), mask=mask,
                              initial_state=self.states.state("h", features))
            self.states.save_state("h", h, features)
            return {"next_chars": self.head(out)}
    return Segmented()


MODELS = {  # config -> (model, loss)
    "chars_independent.yaml": (_chars_model, "sparse"),
    "chars_plugin.yaml": (lambda keras: _chars_model(keras, classes=128), "one_hot"),  # its targets are one-hot
    "stream_continuous.yaml": (_stream_model, "sparse"),
    "sentences_discrete.yaml": (_sentences_model, "sparse"),
    "sentences_chunked.yaml": (_chunked_model, "sparse"),
    "sentences_segmented.yaml": (_segmented_model, "sparse"),
}


def throughput(dataset, batches: int = 60) -> tuple[float, int]:
    """Examples per second over ``batches`` batches after one warm-up batch."""
    import tensorflow as tf

    it = iter(dataset)
    next(it)
    start, count = time.perf_counter(), 0
    for _ in range(batches):
        element = next(it)
        first = tf.nest.flatten(element)[0]
        count += int(first.shape[0])
    return count / (time.perf_counter() - start), count


def dataset_of(path: str):
    """(input_fn, its dataset) of the config at ``path``. A config with a ``service`` block reads through an
    in-process tf.data service (a dispatcher and a worker on ports the system chooses), as the service
    example in docs/scaling-out.md does: its address names a dispatcher a user starts, which the demo cannot assume."""
    from batchloaders import build_input_fn  # deferred: imports TensorFlow, after main's quiet import

    input_fn = build_input_fn(path)
    if input_fn.config.service is None:
        return input_fn, input_fn()
    from batchloaders.runtime.service import (  # deferred: imports TensorFlow, after main's quiet import
        bound_address, start_dispatcher, start_worker)

    dispatcher = start_dispatcher(0)
    address = bound_address(dispatcher)
    # Serving until the process ends; a short heartbeat, since deleting a worker at exit waits for it.
    _servers.extend([dispatcher, start_worker(address, 0, heartbeat_ms=500)])
    print(f"   (an in-process tf.data service at {address} instead of {input_fn.config.service.address})")
    return input_fn, input_fn(params={"service_address": address})


_servers: list = []


def main() -> int:
    import_tensorflow()  # first (writing the data imports it), without its native start-up lines
    from batchloaders.demo_data import generate  # deferred: imports TensorFlow, after the line above

    print("== generating example datasets from the Python documentation text (no download)")
    root = generate()
    print(f"   {root}")
    configs = sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml")))
    manifests = sorted(glob.glob(os.path.join(ROOT, "manifests", "*.json")))
    print("== batchloaders validate configs/ manifests/")
    if validate(configs + manifests) != 0:
        return 1

    import keras

    keras.utils.set_random_seed(0)
    for path in configs:
        name = os.path.basename(path)
        print(f"\n== {name}")
        input_fn, dataset = dataset_of(path)
        config = input_fn.config
        print(f"   loader: {config.type}, batch size {config.target_batch_size}, "
              f"{len(config.dataset.files)} data files")
        for i, part in enumerate(("features", "targets")):
            for key, spec in dataset.element_spec[i].items():
                print(f"   {part}[{key!r}]: {spec.dtype.name} {spec.shape.as_list()}")
        rate, count = throughput(dataset)
        print(f"   throughput: {rate:,.0f} examples/s over {count} examples ({os.cpu_count()} CPU cores)")
        if name not in MODELS:
            continue
        build, loss = MODELS[name]
        model = build(keras)
        model.compile(optimizer=keras.optimizers.Adam(3e-3),
                      loss=(keras.losses.SparseCategoricalCrossentropy(from_logits=True) if loss == "sparse"
                            else keras.losses.CategoricalCrossentropy(from_logits=True)),
                      # XLA takes no strings (segmenting's counters carry its key); on a GPU "auto" is XLA
                      jit_compile="auto" if stages.of(config).xla_compilable else False)
        history = model.fit(dataset, steps_per_epoch=40, epochs=4, verbose=0, shuffle=False)
        losses = " -> ".join(f"{v:.3f}" for v in history.history["loss"])
        print(f"   tiny Keras model, 4 x 40 steps: loss {losses}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
