"""The config check runs its sections in order on one context: one run reports every section's problems."""
from __future__ import annotations

import pytest

from batchloaders import ConfigError, load_config
from batchloaders.config.sections import loader
from conftest import example, feature, loader_config, write_manifest, write_records

UNUSED = "is constructed but not used by the model: expected one of the model's inputs or targets (id, missing, x)"
# (section, JSON path, message), in the order the sections report them; {manifest} is the manifest's path.
EXPECTED = [
    ("primary", "$.args.primary_features[2].to_name", f"to_name 'nm' {UNUSED}"),
    ("primary", "$.args.primary_features[2].from_name",
     "feature 'nope' is not in the manifest {manifest}; available: id, x, name"),
    ("secondary", "$.args.secondary_features[0].to_name", f"to_name 'k' {UNUSED}"),
    ("secondary", "$.args.secondary_features[0].type",
     "secondary feature type 'chunk_index' describes a chunk, and there are no chunks: expected a chunking block in "
     "args (chunk metadata exists only once examples are cut into chunks)"),
    ("steps", "$.args.processing_steps[0].tensor",
     "tensor 'z' is not a primary or secondary feature; expected one of: id, x, nm, k"),
    ("service", "$.args.service.address", "found port 99999 in 'localhost:99999': expected a port from 1 to 65535"),
    ("model", "$.model.inputs",
     "model tensor 'missing' is not produced by any primary or secondary feature; produced: id, x, nm, k"),
    ("padding", "$.args.padding[0].shape",
     "found a shape of rank 1 [4] for tensor 'x' of rank 2: expected 2 entries (no batch axis; -1 = batch maximum)"),
    ("bucketing", "$.args.bucketing.by",
     "tensor 'q' is not a primary or secondary feature; expected one of: id, x, nm, k"),
    ("bucketing", "$.args.bucketing.batch_sizes",
     "found batch_sizes without boundaries: expected boundaries too (batch_sizes has one entry per bucket, one more "
     "than boundaries)"),
    ("loader", "$.args.multi_load",
     "multi_load must be false when secondary_features are given and processing_steps are given and padding is "
     "enabled (the compiler parses in batches on its own whenever that gives identical results, so multi_load is not "
     "needed for speed)"),
]


def test_each_section_reports_at_its_path_in_one_run(tmp_path):
    d = tmp_path / "data"
    write_manifest(d, [feature("id", "int64", [], "int"), feature("x", "float32", [2, 3], "float"),
                       feature("name", "string", [], "string")])
    write_records(d / "a.tfrecords", [example(id=("int", [1]), x=("float", [0] * 6), name=("bytes", ["n"]))])
    cfg = loader_config(d, [("id", "id"), ("x", "x"), ("nope", "nm")], inputs=["x", "missing"], targets=["id"],
                        secondary_features=[{"to_name": "k", "type": "chunk_index"}],
                        processing_steps=[{"tensor": "z", "type": "slice", "args": {"slice": "[0]"}}],
                        padding=[{"tensor": "x", "shape": [4]}], multi_load=True,
                        service={"address": "localhost:99999"}, bucketing={"by": "q", "batch_sizes": [2]})
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    manifest = str(d / "__manifest__.json")
    assert [(p.path, p.message) for p in info.value.problems] == [
        (path, message.replace("{manifest}", manifest)) for _, path, message in EXPECTED]


# loader type -> (is_sequence, concatenates_records, stacks_record_rows, window_unit, fixed_window(4, 4))
FACTS = {
    "independent": (False, False, False, "steps", None),
    "continuous_sequence": (True, True, False, "steps", 4),
    "discrete_sequence": (True, False, True, "records", 4),
}


@pytest.mark.parametrize("loader_type", sorted(FACTS))
def test_loader_type_facts(loader_type):
    assert (loader.is_sequence(loader_type), loader.concatenates_records(loader_type),
            loader.stacks_record_rows(loader_type), loader.window_unit(loader_type),
            loader.fixed_window(loader_type, 4, 4)) == FACTS[loader_type]
    assert loader.fixed_window(loader_type, 2, 4) is None
