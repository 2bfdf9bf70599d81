"""A new regroup stage is one module: its spec, its check, its schema and how it makes batches. Written into
tmp_path, listed under a config's ``plugins:``, its block is checked by load_config from a YAML file like a
built-in stage's.

Fixture records encode where they came from: record r of file f has id 100*f + r.
"""
from __future__ import annotations

import textwrap

import pytest
import yaml

from batchloaders import ConfigError, build_input_fn, load_config
from batchloaders.cli.describe import describe
from batchloaders.regroup import stage as stages
from conftest import collect, loader_config

IDS = [100 * f + r for f in range(3) for r in range(4)]

MODULE = textwrap.dedent('''
    """repeat_each: every example given ``times`` times in a row, then batched."""
    import dataclasses
    from typing import ClassVar

    from batchloaders.regroup import stage as stages


    @dataclasses.dataclass(frozen=True)
    class RepeatEachSpec:
        stage: ClassVar[str] = "repeat_each"
        times: int
        json_path: str = "$.args.repeat_each"

        def origins(self):
            return frozenset()


    @stages.register
    class RepeatEach(stages.Stage):
        name = "repeat_each"
        schema = {"type": "object", "additionalProperties": False, "required": ["times"],
                  "properties": {"times": {"description": "How many times each example is given.",
                                           "type": "integer", "minimum": 1}}}
        description = "Every example given several times in a row. Defaults to none."
        regroups = "gives every example several times"

        def check(self, ctx, block, *, alone):
            return RepeatEachSpec(block["times"]) if alone else None

        def apply(self, build):
            ds = stages.STAGES[stages.PLAIN].apply(build)
            times, config = build.config.regroup.times, build.config
            return ds.unbatch().flat_map(lambda *e: __import__("tensorflow").data.Dataset.from_tensors(
                e if len(e) > 1 else e[0]).repeat(times)).batch(build.batch_size, config.drop_remainder)

        def lines(self, config):
            return [f"repeat_each: every example {config.regroup.times} times in a row"]
''')


@pytest.fixture
def project(tmp_path, numbered_dataset):
    """The stage's module beside the configs; the stage leaves the registry after the test."""
    (tmp_path / "repeat_each.py").write_text(MODULE)
    yield tmp_path
    stages.STAGES.pop("repeat_each", None)


def write_config(project, data, **args) -> str:
    cfg = loader_config(data, [("id", "id"), ("x", "x")], inputs=["x"], targets=["id"], target_batch_size=5,
                        **args)
    cfg["plugins"] = ["repeat_each.py"]
    path = project / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_a_stage_from_one_module_is_built_from_a_yaml_config(project, numbered_dataset):
    config = load_config(write_config(project, numbered_dataset, repeat_each={"times": 2}))
    assert config.regroup_of("repeat_each").times == 2 and config.packing is None
    input_fn = build_input_fn(config)
    assert input_fn.stage is stages.STAGES["repeat_each"]
    twice = [i for i in IDS for _ in range(2)]
    assert [[int(i) for i in targets["id"]] for _, targets in collect(input_fn())] == [
        twice[k:k + 5] for k in range(0, 24, 5)]
    assert "repeat_each: every example 2 times in a row" in describe(config)


def test_the_stage_block_is_checked_against_its_schema(project, numbered_dataset):
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(project, numbered_dataset, repeat_each={"times": 0}))
    assert [(p.path, p.message) for p in caught.value.problems] == [
        ("$.args.repeat_each.times", "expected an integer >= 1, found 0")]


def test_the_stage_and_another_regroup_block_are_refused_together(project, numbered_dataset):
    path = write_config(project, numbered_dataset, repeat_each={"times": 2},
                        bucketing={"by": "x", "boundaries": [3], "batch_sizes": [2, 2]})
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert [(p.file, p.path, p.message) for p in caught.value.problems] == [
        (path, "$.args.repeat_each", "found repeat_each and bucketing together: expected one (repeat_each gives "
                                     "every example several times; bucketing batches examples of similar length)")]
