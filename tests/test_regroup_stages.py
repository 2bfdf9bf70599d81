"""Regroup stages: one interface (regroup/stage.py), one registry; a new stage is one class and one line, its
block checked by load_config like a built-in's (tests/test_extension_stage.py imports one from a config's plugins).

Fixture records encode where they came from: record r of file f has id 100*f + r.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import pytest

from batchloaders import build_input_fn, load_config
from batchloaders.cli.describe import describe, plan
from batchloaders.regroup import stage as stages
from conftest import collect, feature, loader_config, sequence_example, write_manifest, write_records

IDS = [100 * f + r for f in range(3) for r in range(4)]


@dataclasses.dataclass(frozen=True)
class RepeatSpec:
    """The toy stage's typed block: every plain batch given ``times`` times."""

    stage: ClassVar[str] = "toy_repeat"
    times: int
    json_path: str = "$.args.toy_repeat"

    def origins(self) -> frozenset[str]:
        return frozenset()


class Repeat(stages.Stage):
    name = "toy_repeat"
    counted_as = "repeated batches"
    schema = {"type": "object", "additionalProperties": False, "required": ["times"],
              "properties": {"times": {"description": "How many times each batch is given.", "type": "integer",
                                       "minimum": 1}}}

    def check(self, ctx, block, *, alone):
        return RepeatSpec(block["times"]) if alone else None

    def batches(self, config, examples, batch_size):
        plain = stages.STAGES[stages.PLAIN].batches(config, examples, batch_size)
        return None if plain is None else plain * config.regroup.times

    def apply(self, build):
        ds = stages.STAGES[stages.PLAIN].apply(build)
        times = build.config.regroup.times
        return ds.flat_map(lambda *batch: __import__("tensorflow").data.Dataset.from_tensors(
            batch if len(batch) > 1 else batch[0]).repeat(times))

    def lines(self, config):
        return [f"toy_repeat: every batch {config.regroup.times} times"]

    def as_json(self, config):
        return {"times": config.regroup.times}


@pytest.fixture
def toy_stage():
    stages.register(Repeat)  # the one registry line a new stage needs
    yield
    del stages.STAGES["toy_repeat"]


def ids_of(batches):
    return [[int(i) for i in targets["id"]] for _, targets in batches]


def test_a_new_stage_is_one_class_and_one_registry_line(numbered_dataset, toy_stage):
    config = load_config(loader_config(numbered_dataset, [("id", "id"), ("x", "x")], inputs=["x"], targets=["id"],
                                       target_batch_size=5, toy_repeat={"times": 2}))
    assert config.regroup == RepeatSpec(times=2)
    input_fn = build_input_fn(config)
    assert input_fn.stage is stages.STAGES["toy_repeat"]
    ds = input_fn()
    assert ids_of(collect(ds)) == [IDS[0:5], IDS[0:5], IDS[5:10], IDS[5:10], IDS[10:12], IDS[10:12]]
    assert input_fn.stage.batches(config, 12, 5) == 6  # what the compile template asserts when counts are known
    assert "toy_repeat: every batch 2 times" in describe(config)
    shown = plan(config)
    assert (shown["toy_repeat"], shown["bucketing"], shown["segmenting"]) == ({"times": 2}, None, None)


def test_an_unknown_stage_is_named_with_the_closest_registered_one(numbered_dataset):
    config = load_config(loader_config(numbered_dataset, [("id", "id")], inputs=["id"]))
    with pytest.raises(ValueError, match=r"^no regroup stage is registered as 'toy_repeat'$"):
        stages.of(dataclasses.replace(config, regroup=RepeatSpec(times=2)))  # no name is close to it
    with pytest.raises(ValueError, match=r"^no regroup stage is registered as 'buketing' \(did you mean "
                                         r"'bucketing'\?\)$"):
        stages.of(dataclasses.replace(config, regroup=MisspeltSpec(times=2)))


@dataclasses.dataclass(frozen=True)
class MisspeltSpec(RepeatSpec):
    stage: ClassVar[str] = "buketing"


def test_a_stage_name_registered_twice_is_refused():
    with pytest.raises(ValueError, match="regroup stage 'bucketing' is registered twice"):
        stages.register(type("Again", (stages.Stage,), {"name": "bucketing"}))


@pytest.fixture(scope="module")
def sequences(tmp_path_factory):
    """12 SequenceExamples; example r has r % 4 + 1 steps of x = 10*r + j."""
    d = tmp_path_factory.mktemp("stages") / "seq"
    write_manifest(d, [feature("x", "int64", [], "int", var_len=True)], allow_var_len=True)
    write_records(d / "part-0.tfrecords", [sequence_example({}, {"x": ("int", [[10 * r + j] for j in range(r % 4 + 1)])})
                                           for r in range(12)])
    return d


# (config block, stage name, what describe says its batches are counted as, its static batch of 4 with
# drop_remainder false and epochs 1, and the batches it says 12 examples make in batches of 5)
ROWS = [
    ({}, "batch", "examples", None, 3),
    ({"bucketing": {"by": "x", "boundaries": [2], "batch_sizes": [5, 5]}}, "bucketing", "buckets", None, None),
    ({"packing": {"length": 4, "tensors": ["x"]}}, "packing", "rows", None, None),
    ({"chunking": {"size": 2}}, "chunking", "chunks", None, None),
    ({"segmenting": {"num_unroll": 2}}, "segmenting", "segment batches", 4, None),
]


@pytest.mark.parametrize("block, name, counted_as, static, batches", ROWS, ids=[r[1] for r in ROWS])
def test_each_config_block_has_its_stage(sequences, block, name, counted_as, static, batches):
    config = load_config(loader_config(sequences, [("x", "x")], inputs=["x"], target_batch_size=5, padding=True,
                                       **block))
    stage = stages.of(config)
    assert (stage.name, stage.counted_as, stage.example_wise) == (name, counted_as, name == "batch")
    assert stage.static_batch(config, 4) == static
    assert stage.batches(config, 12, 5) == batches
    shown = plan(config)
    assert [k for k in stages.names() if shown[k] is not None] == ([name] if block else [])
