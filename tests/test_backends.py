"""Keras 3 fits a small model from an example config on each backend it can run here: TensorFlow, JAX (CPU) and,
when installed, PyTorch. Each fit runs in a process of its own, KERAS_BACKEND set before Keras is imported."""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]

# 3 steps of docs/backends.md's next-character model (Keras on JAX) on configs/chars_independent.yaml; prints
# what Keras saw, as JSON.
FIT = """
import json, keras, numpy as np
import batchloaders

inputs = keras.Input(shape=(16,), dtype="int32", name="context")
hidden = keras.layers.Flatten()(keras.layers.Embedding(256, 8)(inputs))
model = keras.Model(inputs, keras.layers.Dense(256, name="next_char")(hidden))
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
input_fn = batchloaders.build_input_fn("configs/chars_independent.yaml", model=model)
seen = []
class Seen(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        seen.append(batch)
before = [w.copy() for w in model.get_weights()]
history = model.fit(input_fn(), epochs=1, steps_per_epoch=3, verbose=0, callbacks=[Seen()])
first = next(iter(input_fn().as_numpy_iterator()))
print(json.dumps({"backend": keras.backend.backend(), "batches": seen, "loss": history.history["loss"],
                  "changed": all(not np.array_equal(a, b) for a, b in zip(before, model.get_weights())),
                  "first": [first[0].shape[0], first[0].shape[1], int(first[0].sum()), int(first[1].sum())]}))
"""


@pytest.fixture(scope="module")
def demo_data():
    from batchloaders.demo_data import generate

    generate()  # the example configs read the demo datasets, as after make demo


def fit(backend: str) -> dict:
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", FIT], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def on_tensorflow(demo_data) -> dict:
    return fit("tensorflow")


@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_keras_fits_from_an_example_config(on_tensorflow, backend):
    if backend != "tensorflow" and importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed: the test extra installs jax[cpu]; PyTorch's only Linux wheel on "
                    "the package index is its CUDA build, with 19 nvidia-*, cuda-* and triton dependencies, "
                    "so the test extra leaves it out")
    got = on_tensorflow if backend == "tensorflow" else fit(backend)
    assert got["backend"] == backend and got["batches"] == [0, 1, 2] and got["changed"]
    assert len(got["loss"]) == 1 and 0 < got["loss"][0] < 6.0  # near log(256) = 5.5 at the start
    # The same first batch on every backend: seed 1's shuffled 64 contexts of 16 characters (the pipeline is
    # TensorFlow's whatever Keras computes with).
    assert got["first"][:2] == [64, 16] and got["first"] == on_tensorflow["first"]
