"""A fourth loader type from one module: a Loader subclass registered with its kind, then built from a YAML
config through load_config and build_input_fn like the built-in ones; a loader lacking part of the contract
is refused where it registers.

``reversed_records``: every record one example (the independent loader's kind and args), each file's records
read in reverse order. Fixture records say where they came from: record r of file f has id 100*f + r.
"""
from __future__ import annotations

import argparse

import pytest
import tensorflow as tf
import yaml

from batchloaders import build_input_fn, load_config
from batchloaders.cli.main import build_parser
from batchloaders.config import kinds
from batchloaders.config.kinds import LoaderKind
from batchloaders.config.schema import load_schema
from batchloaders.errors import ConfigError
from batchloaders.loaders import registry
from batchloaders.loaders.registry import Loader
from batchloaders.read import sources
from batchloaders.read.parsing import parse_batch
from conftest import collect, loader_config

NAME = "reversed_records"
WHOLE_FILE = 64  # records per block: a whole fixture file


class ReversedRecords(Loader):
    """Each file's records in reverse order, one example each, parsed a batch at a time."""

    kind = LoaderKind(NAME, sequence=False, concatenates_records=False, example="record",
                      example_is="the record", args_schema="independent_args.schema.json")

    def batches(self, config, shard, batch_size, reader):
        manifest, selected = config.dataset.manifest, config.selected

        def reversed_file(f):
            def flip(block):
                count = tf.size(block["serialized"], out_type=tf.int64)
                return {"serialized": tf.reverse(block["serialized"], [0]), "file": tf.fill([count], f["index"]),
                        "record": block["first"] + tf.range(count - 1, -1, -1, dtype=tf.int64)}
            return reader.blocks(f["file"], f["index"], WHOLE_FILE, then=flip).unbatch()

        def parse(records):
            values, lengths = parse_batch(records["serialized"], manifest, selected,
                                          names=reader.record_names(records["file"], records["record"]))
            return {"values": values, "lengths": lengths}
        records = sources.file_names(config, shard, repeat=False).flat_map(reversed_file).repeat(config.epochs)
        return records.batch(batch_size, drop_remainder=config.drop_remainder).map(parse)


@pytest.fixture
def reversed_loader():
    """The loader registered for one test, then forgotten (its kind with it)."""
    registry.register(ReversedRecords())
    yield NAME
    registry.unregister(NAME)


def _yaml_config(tmp_path, data_dir, **args) -> str:
    cfg = loader_config(data_dir, [("id", "id"), ("x", "x")], inputs=["x"], targets=["id"], loader=NAME, **args)
    path = tmp_path / "reversed.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _ids(batches) -> list[list[int]]:
    return [targets["id"].tolist() for _, targets in batches]


def test_a_registered_loader_is_built_from_a_yaml_config(tmp_path, numbered_dataset, reversed_loader):
    config = load_config(_yaml_config(tmp_path, numbered_dataset, target_batch_size=5))
    assert config.type == NAME and kinds.kind(NAME).example == "record"
    input_fn = build_input_fn(config)
    assert isinstance(input_fn.loader, ReversedRecords)
    batches = collect(input_fn())
    assert _ids(batches) == [[3, 2, 1, 0, 103], [102, 101, 100, 203, 202], [201, 200]]
    assert batches[0][0]["x"].tolist() == [[3, 3.5], [2, 2.5], [1, 1.5], [0, 0.5], [103, 103.5]]


def test_steps_registered_for_every_loader_serve_the_new_one(tmp_path, numbered_dataset, reversed_loader):
    """A built-in step registered with the default ``loaders`` (every loader type) is available to a type
    registered after it."""
    path = _yaml_config(tmp_path, numbered_dataset, target_batch_size=4, drop_remainder=True,
                        processing_steps=[{"tensor": "id", "type": "cast", "args": {"dtype": "int32"}}])
    batches = collect(build_input_fn(path)())
    assert _ids(batches) == [[3, 2, 1, 0], [103, 102, 101, 100], [203, 202, 201, 200]]
    assert batches[0][1]["id"].dtype == "int32"


def test_a_global_shuffle_is_refused_when_the_config_loads_for_a_loader_without_a_global_order(
        tmp_path, numbered_dataset, reversed_loader):
    """The kind says whether the loader has a global order: the config check (which imports no loader) refuses
    shuffle_scope global for one that has not, as validate would, before anything is built."""
    path = _yaml_config(tmp_path, numbered_dataset, shuffle=True, shuffle_scope="global", seed=1)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert [(p.path, p.message) for p in raised.value.problems] == [(
        "$.args.shuffle_scope", "found global, but the reversed_records loader has no global order (it cannot "
                                "count an epoch's examples from the record counts); expected shuffle_scope buffer")]
    assert ReversedRecords().global_order is False and registry.LOADERS["independent"].global_order is True


def test_an_unregistered_type_is_refused_by_the_schema(tmp_path, numbered_dataset):
    with pytest.raises(ConfigError) as raised:
        load_config(_yaml_config(tmp_path, numbered_dataset))
    assert ("$.type: unknown loader type 'reversed_records'; expected one of: independent, continuous_sequence, "
            "discrete_sequence (line") in str(raised.value)


class _NoBatches(Loader):
    kind = LoaderKind("no_batches", sequence=False, concatenates_records=False, example="record",
                      example_is="the record")
    reads_records = True


class _NoKind(Loader):
    def batches(self, config, shard, batch_size, reader):
        return None


@pytest.mark.parametrize("loader, message", [
    (_NoBatches(), "loader _NoBatches cannot be registered: it lacks batches(config, shard, batch_size, reader); "
                   "records (it sets reads_records)"),
    (_NoKind(), "loader _NoKind cannot be registered: it lacks kind (a config.kinds.LoaderKind)"),
    (object(), "loader object cannot be registered: it lacks Loader (found object, expected an instance of "
               "loaders.registry.Loader)"),
])
def test_a_loader_lacking_part_of_the_contract_is_refused_at_registration(loader, message):
    with pytest.raises(TypeError) as raised:
        registry.register(loader)
    assert str(raised.value) == message
    assert "no_batches" not in registry.LOADERS and "no_batches" not in kinds.KINDS


def test_the_registry_is_where_every_loader_name_comes_from():
    """The built-in loaders registered are the kinds table's rows, the shipped schema's enum, the default
    loaders of a step and the choices of ``batchloaders init --loader``."""
    assert tuple(registry.LOADERS) == kinds.names() == kinds.BUILTIN
    assert load_schema("loader_config.schema.json")["properties"]["type"]["enum"] == list(registry.LOADERS)
    assert list(kinds.ALL_LOADERS) == list(registry.LOADERS)
    init = next(a for a in build_parser()._subparsers._group_actions[0].choices["init"]._actions
                if "--loader" in a.option_strings)
    assert list(init.choices) == list(registry.LOADERS) and init.default == "independent"
    assert isinstance(init, argparse.Action)


def test_every_loader_type_reads_as_the_tuple_it_was():
    """Plugins wrote ``loaders=ALL_LOADERS + ("mine",)`` and indexed it, when it was a tuple of the three names."""
    from batchloaders.transform.registry import ALL_LOADERS

    assert ALL_LOADERS + ("mine",) == tuple(kinds.BUILTIN) + ("mine",)
    assert ("mine",) + ALL_LOADERS == ("mine",) + tuple(kinds.BUILTIN)
    assert ALL_LOADERS[0] == kinds.BUILTIN[0] and ALL_LOADERS[-1] == kinds.BUILTIN[-1]
