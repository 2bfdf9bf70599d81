"""The package's own dataset functions are traced as written, without AutoGraph (graphs.py).

AutoGraph converts a function handed to tf.data unless told not to, and with it every
Python function that one calls: the whole pipeline builder. That cost 1.3 s of the first
``input_fn()`` in a process for the discrete example config (2.45 against 1.18 s with the
first batch) and ~0.4 s for the independent one, and its wrappers slowed every later trace.
Each case builds a pipeline in this process (tracing its functions), then asks AutoGraph's
own cache which functions it converted. (A plugin's functions are converted on purpose:
test_plugins.py.)
"""
from __future__ import annotations

import dataclasses
import glob
import os

import pytest
from tensorflow.python.autograph.impl import api as autograph_api  # its cache of converted code

import batchloaders
from batchloaders import build_input_fn, load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.dirname(os.path.abspath(batchloaders.__file__))
CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml")))


@pytest.fixture(scope="module")
def demo_data():
    from batchloaders.demo_data import generate

    generate()


def converted_package_functions(build) -> list[str]:
    """``build()`` (a dataset: its functions are traced as it is made); then 'file:function' of each
    function of the package's own that AutoGraph converted meanwhile, extend.py's tracing of plugins aside."""
    cache = autograph_api._TRANSPILER._cache._cache  # keyed by code object
    cache.clear()  # what earlier tests converted would not be converted again
    build()
    names = []
    for code in list(cache):
        path = getattr(code, "co_filename", "")
        if path.startswith(PACKAGE) and not path.endswith("extend.py"):
            names.append(f"{os.path.relpath(path, PACKAGE)}:{code.co_name}")
    return sorted(names)


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_example_configs_convert_none_of_ours(demo_data, path):
    config = dataclasses.replace(load_config(path), service=None)  # the pipeline a service's workers run
    assert converted_package_functions(build_input_fn(config)) == []


@pytest.mark.parametrize("change", [
    {"seed": None, "epochs": 2},  # a seed per iterator, a pass per epoch
    {"seed": 5, "epochs": None},  # endless, with the empty-pass guard
], ids=["seed per iterator", "endless"])
def test_the_epoch_loops_convert_none_of_ours(demo_data, change):
    base = load_config(os.path.join(ROOT, "configs", "chars_independent.yaml"))
    config = dataclasses.replace(base, shuffling=dataclasses.replace(base.shuffling, shuffle=True), **change)
    assert converted_package_functions(build_input_fn(config)) == []


def test_a_pipeline_started_part_way_converts_none_of_ours(demo_data):
    """``input_fn(skip_batches=N)`` (what a replay restore builds) starts part-way through an epoch."""
    base = load_config(os.path.join(ROOT, "configs", "chars_independent.yaml"))
    config = dataclasses.replace(base, seed=5, shuffling=dataclasses.replace(base.shuffling, shuffle=True), epochs=3)
    input_fn = build_input_fn(config)
    assert converted_package_functions(lambda: input_fn(skip_batches=5)) == []


@pytest.mark.parametrize("path", [p for p in CONFIGS if "service" not in p], ids=os.path.basename)
def test_bench_and_preview_measures_convert_none_of_ours(demo_data, path):
    """``batchloaders bench`` and ``preview`` count real and padded elements in datasets of their own
    (``preview`` of the discrete example took 7.9 s, 4.3 of it AutoGraph converting the steps' code)."""
    from batchloaders.cli import bench
    from batchloaders.cli import preview

    config = load_config(path)

    def measures():  # what the two commands build, as they decide it
        if config.type == "continuous_sequence":
            bench.survey(config)
        if bench.padded_tensors(config) or config.chunking is not None:
            bench.count_lengths(config, 4, 1)
        if config.packing is None and config.segmenting is None and preview.measured(config):
            preview.padding_dataset(config)
        for name in bench.padded_tensors(config)[:1]:
            preview.example_lengths(config, name, 1)
    assert converted_package_functions(measures) == []
