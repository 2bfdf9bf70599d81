"""How often a jitted JAX step compiles over one epoch of configs/sentences_discrete.yaml, by padding, and what
the epoch costs: the figures of docs/backends.md (Static shapes).

    python benchmarks/jax_compiles.py            # needs jax (the test extra installs jax[cpu]) and the demo data

The config's windows of 2 to 4 sentences are read for one epoch (``epochs: 1``, ``drop_remainder: true``),
through ``batchloaders.numpy_iterator``, into a small jitted step (an embedding of the characters, a mean, a
squared error against the next characters; its Python body counts the traces, one per compile). Four paddings:

* ``batch maximum``: the config as written, each batch padded to its longest window;
* ``fixed``: ``shape: [L]`` for the three tensors, L the longest window of the epoch rounded up to 256;
* ``bucketing``: boundaries every 128 characters up to L, batch size 16 each, ``pad_to_boundary`` the three
  tensors (the last bucket, L characters and longer, would pad to its batch maximum: no window reaches it);
* ``bucketing, batch maximum``: the same buckets without pad_to_boundary or a fixed shape.
"""
from __future__ import annotations

import copy
import os
import pathlib
import sys
import time

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def configs() -> dict:
    with open(ROOT / "configs" / "sentences_discrete.yaml") as f:
        base = yaml.safe_load(f)
    base["args"]["dataset"]["args"]["data_dir"] = str(ROOT / "demo_data" / "sentences")
    base["args"].update(epochs=1, drop_remainder=True)
    return base


def with_padding(base: dict, longest: int, *, fixed: bool, buckets: bool, to_boundary: bool) -> dict:
    config = copy.deepcopy(base)
    args = config["args"]
    if fixed:
        args["padding"] = [{"tensor": "chars", "shape": [longest]}, {"tensor": "next_chars", "shape": [longest]},
                           {"tensor": "sentence_ids", "shape": [longest], "value": -1}]
    if buckets:
        args["bucketing"] = {"by": "chars", "boundaries": list(range(128, longest + 1, 128)),
                             "batch_sizes": [16] * (len(range(128, longest + 1, 128)) + 1)}
        if to_boundary:
            args["bucketing"]["pad_to_boundary"] = ["chars", "next_chars", "sentence_ids"]
    return config


def epoch(config: dict) -> tuple[int, int, int, float]:
    """(batches, distinct shapes, compiles, seconds) of one epoch through the jitted step."""
    import jax
    import jax.numpy as jnp

    import batchloaders

    traces = []

    @jax.jit
    def step(table, features, targets):
        traces.append(features["chars"].shape)  # Python runs here only while jax traces: once per compile
        hidden = jnp.take(table, features["chars"], axis=0).mean(axis=-1)
        return jnp.mean((hidden - targets["next_chars"] / 128.0) ** 2)

    table = jnp.linspace(0.0, 1.0, 256 * 32).reshape(256, 32)
    start = time.perf_counter()
    batches, shapes = 0, set()
    for features, targets in batchloaders.numpy_iterator(config):
        step(table, features, targets).block_until_ready()
        batches += 1
        shapes.add(features["chars"].shape)
    return batches, len(shapes), len(traces), time.perf_counter() - start


def main() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    base = configs()
    import batchloaders

    longest = max(f["chars"].shape[1] for f, _ in batchloaders.numpy_iterator(base))
    bound = -(-longest // 256) * 256
    print(f"longest window of the epoch: {longest} characters; fixed length {bound}")
    print("| padding | batches | distinct batch shapes | compiles | epoch, seconds |")
    print("| --- | --- | --- | --- | --- |")
    for name, kwargs in [("batch maximum", dict(fixed=False, buckets=False, to_boundary=False)),
                         (f"fixed shape [{bound}]", dict(fixed=True, buckets=False, to_boundary=False)),
                         ("bucketing every 128, pad_to_boundary", dict(fixed=False, buckets=True, to_boundary=True)),
                         ("bucketing every 128, batch maximum", dict(fixed=False, buckets=True, to_boundary=False))]:
        batches, shapes, compiles, seconds = epoch(with_padding(base, bound, **kwargs))
        print(f"| {name} | {batches} | {shapes} | {compiles} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
