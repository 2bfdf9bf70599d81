"""What input_fn's own arguments may be: params' batch size is bounded as the config's is, and skip_batches
past the run gives nothing, whatever its size."""
from __future__ import annotations

import json

import pytest

import batchloaders
from batchloaders.errors import ConfigError
from conftest import loader_config

# numbered_dataset: 3 files x 4 records, id = 100*f + r; read in file order (no shuffle, serial).
IDS = [100 * f + r for f in range(3) for r in range(4)]


def _input_fn(data_dir, counts: bool, **args):
    if counts:  # the manifest lists each file's records: skip_batches is then a seek, not a read
        path = data_dir / "__manifest__.json"
        manifest = json.loads(path.read_text())
        manifest["files"] = [{"name": f"part-{f}.tfrecords", "num_records": 4} for f in range(3)]
        path.write_text(json.dumps(manifest))
    config = loader_config(data_dir, [("id", "id")], inputs=["id"], num_parallel_reads=1, **args)
    return batchloaders.build_input_fn(config)


def _ids(dataset):
    return [b["id"].tolist() for b in dataset.as_numpy_iterator()]


# skip_batches -> the batches left of 3 (batches of 5, 5 and 2)
SKIPS = [(1, [IDS[5:10], IDS[10:]]), (2, [IDS[10:]]), (3, []), (2**31 - 1, []),
         (2**31, []),  # tf.data's skip alone wraps this to 0 and gives every batch
         (2**32 + 1, [])]  # ... and this to 1


@pytest.mark.parametrize("counts", [False, True], ids=["no counts", "counts"])
def test_skip_batches(numbered_dataset, counts):
    input_fn = _input_fn(numbered_dataset, counts, target_batch_size=5)
    assert _ids(input_fn()) == [IDS[:5], IDS[5:10], IDS[10:]]
    assert [(skip, _ids(input_fn(skip_batches=skip))) for skip, _ in SKIPS] == SKIPS


@pytest.mark.parametrize("size", [0, -1, 2**20 + 1, 10**9, True, 2.0])
def test_params_batch_size_is_bounded(numbered_dataset, size):
    input_fn = _input_fn(numbered_dataset, False)
    with pytest.raises(ConfigError) as caught:
        input_fn(params={"batch_size": size})
    problem, = caught.value.problems
    assert (problem.file, problem.path) == ("<params>", "$.batch_size")
    assert problem.message == f"found {size!r}: expected an integer from 1 to 1,048,576 (the bound target_batch_size has)"


def test_params_batch_size_larger_than_the_run(numbered_dataset):
    """drop_remainder true and a batch larger than the whole run: no batch would come out, so it is refused."""
    input_fn = _input_fn(numbered_dataset, True, drop_remainder=True)
    assert _ids(input_fn(params={"batch_size": 12})) == [IDS]
    with pytest.raises(ConfigError) as caught:
        input_fn(params={"batch_size": 13})
    problem, = caught.value.problems
    assert problem.path == "$.batch_size"
    assert problem.message.startswith("found 13 (per input pipeline), more examples than the run holds")
