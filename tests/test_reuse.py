"""input_fn() calls that would build the same pipeline again get the earlier call's dataset
(batchloaders/runtime/reuse.py); the others build their own, and every call gives the batches a fresh
build_input_fn would."""
from __future__ import annotations

import batchloaders
from conftest import collect, example, loader_config, write_records

SHUFFLED = {"shuffle": True, "num_shuffle_buffer_elements": 12, "num_filenames_shuffle_buffer": 3, "num_mix_files": 3}


def ids(dataset) -> list[list[int]]:
    return [b["id"].tolist() for b in collect(dataset)]


def fresh(numbered_dataset, **args) -> list[list[int]]:
    return ids(batchloaders.build_input_fn(loader_config(numbered_dataset, [("id", "id")], inputs=["id"], **args))())


def test_a_call_like_an_earlier_one_gets_its_dataset_and_its_batches(numbered_dataset):
    input_fn = batchloaders.build_input_fn(loader_config(numbered_dataset, [("id", "id")], inputs=["id"],
                                                         seed=7, **SHUFFLED))
    first = input_fn()
    assert input_fn() is first and input_fn(params={"seed": 7}) is not first  # other arguments: built anew
    expected = fresh(numbered_dataset, seed=7, **SHUFFLED)
    assert sorted(sum(expected, [])) == [100 * f + r for f in range(3) for r in range(4)]
    assert ids(first) == ids(input_fn()) == ids(input_fn(params={"seed": 7})) == expected


def test_other_arguments_build_their_own_pipeline(numbered_dataset):
    input_fn = batchloaders.build_input_fn(loader_config(numbered_dataset, [("id", "id")], inputs=["id"]))
    whole = ids(input_fn())
    assert whole == [[0, 1], [2, 3], [100, 101], [102, 103], [200, 201], [202, 203]]
    assert ids(input_fn(params={"batch_size": 3})) == [[0, 1, 2], [3, 100, 101], [102, 103, 200], [201, 202, 203]]
    assert ids(input_fn(skip_batches=4)) == whole[4:]
    assert ids(input_fn()) == whole


def test_an_unseeded_drawing_run_draws_anew_on_every_call(numbered_dataset):
    input_fn = batchloaders.build_input_fn(loader_config(numbered_dataset, [("id", "id")], inputs=["id"],
                                                         seed=None, **SHUFFLED))
    orders = {tuple(sum(ids(input_fn()), [])) for _ in range(4)}
    assert all(sorted(o) == [100 * f + r for f in range(3) for r in range(4)] for o in orders)
    assert len(orders) > 1  # 12! orders: four calls drawing the same one would be a kept dataset


def test_a_file_that_changed_size_makes_the_next_call_build_anew(numbered_dataset):
    """The files' sizes are written into a pipeline when it is built: a kept one would take the grown file
    for a damaged one. (This manifest lists no counts, so the file may grow.)"""
    input_fn = batchloaders.build_input_fn(loader_config(numbered_dataset, [("id", "id")], inputs=["id"],
                                                         target_batch_size=4))
    assert ids(input_fn()) == [[0, 1, 2, 3], [100, 101, 102, 103], [200, 201, 202, 203]]
    write_records(numbered_dataset / "part-1.tfrecords",
                  [example(id=("int", [100 + r]), x=("float", [0.0, 0.0])) for r in range(6)])
    assert ids(input_fn()) == [[0, 1, 2, 3], [100, 101, 102, 103], [104, 105, 200, 201], [202, 203]]
