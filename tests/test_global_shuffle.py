"""``shuffle_scope: global``: one permutation of all records per epoch, read at their offsets.

Record r of file f holds id = 1000 * f + r (and a note of r % 7 + 1 bytes, so records differ in size and
offsets do not fall on a grid). Files hold 9, 0, 13 and 8 records (file 1 empty): 30 records.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import ResumableIterator, build_input_fn, load_config
from batchloaders.cli.main import main
from batchloaders.errors import ConfigError, DataError, ManifestError, ResumeError
from batchloaders.read.framing import FRAME_BYTES
from batchloaders.read.offset_reader import OffsetReader
from conftest import example, feature, loader_config, write_manifest, write_records

SIZES = (9, 0, 13, 8)
IDS = sorted(1000 * f + r for f, n in enumerate(SIZES) for r in range(n))
N = len(IDS)


def record(f: int, r: int) -> bytes:
    return example(id=("int", [1000 * f + r]), note=("string", [b"n" * (r % 7 + 1)]))


def dataset(tmp_path, *, indexed: bool = True) -> str:
    d = str(tmp_path / "d")
    write_manifest(d, [feature("id", "int64", [], "int"), feature("note", "string", [], "string")])
    for f, n in enumerate(SIZES):
        write_records(os.path.join(d, f"part-{f}.tfrecords"), [record(f, r) for r in range(n)])
    if indexed:
        with pytest.raises(SystemExit) as done:
            main(["index", d])
        assert done.value.code == 0
    return d


def config(d: str, **args) -> dict:
    base = dict(shuffle=True, shuffle_scope="global", seed=5, epochs=2, target_batch_size=4, resume="replay")
    base.update(args)
    return loader_config(d, [("id", "id")], inputs=["id"], **base)


def ids_of(batches) -> list[list[int]]:
    return [np.asarray(b["id"]).tolist() for b in batches]


def flat(batches) -> list[int]:
    return [i for b in batches for i in b]


def context(pipeline: int, pipelines: int) -> tf.distribute.InputContext:
    return tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=pipeline,
                                      num_replicas_in_sync=pipelines)


IDS_IN_FILE_ORDER = [1000 * f + r for f, n in enumerate(SIZES) for r in range(n)]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    return dataset(tmp_path_factory.mktemp("global"))


def test_every_record_once_per_epoch_and_each_epoch_its_own_order(data):
    batches = ids_of(build_input_fn(config(data))())
    assert [len(b) for b in batches] == [4] * 15  # 2 epochs of 30, batches of 4 across the epoch boundary
    order = flat(batches)
    first, second = order[:N], order[N:]
    assert sorted(first) == IDS and sorted(second) == IDS
    assert first != second
    assert first != IDS_IN_FILE_ORDER  # shuffled at all


def test_same_seed_same_order_another_seed_another(data):
    one = flat(ids_of(build_input_fn(config(data))()))
    assert flat(ids_of(build_input_fn(config(data))())) == one
    other = flat(ids_of(build_input_fn(config(data, seed=6))()))
    assert sorted(other[:N]) == IDS and other != one


def test_a_sorted_datasets_first_batch_comes_from_all_of_it(tmp_path):
    """Sorted files (ids rising through the files): a buffer of 4 keeps the first batch among the first records
    read; the global order draws it from the whole dataset."""
    d = dataset(tmp_path)
    first_global = ids_of(build_input_fn(config(d, epochs=1, target_batch_size=6))())[0]
    buffered = config(d, epochs=1, target_batch_size=6, shuffle_scope="buffer", num_shuffle_buffer_elements=4,
                      num_filenames_shuffle_buffer=1, num_mix_files=1)
    first_buffered = ids_of(build_input_fn(buffered)())[0]
    assert set(first_buffered) <= set(IDS_IN_FILE_ORDER[:9])  # the buffer saw only the first file's records
    assert len({i // 1000 for i in first_global}) >= 2  # more than one file in the first batch
    assert max(IDS_IN_FILE_ORDER.index(i) for i in first_global) >= N // 2  # from the back half of the data


@pytest.mark.parametrize("pipelines", [1, 2, 3])
def test_pipelines_share_each_epoch_by_position(data, pipelines):
    """Pipeline k reads the positions g of the run's order with g % pipelines == k: together, every record once
    per epoch, and interleaved position by position they give the unsharded order."""
    whole = flat(ids_of(build_input_fn(config(data, target_batch_size=6))()))
    fn = build_input_fn(config(data, target_batch_size=6))
    shares = [flat(ids_of(fn(context(k, pipelines)))) for k in range(pipelines)]
    assert sorted(i for share in shares for i in share) == sorted(IDS * 2)
    for k, share in enumerate(shares):
        assert share == whole[k::pipelines]


@pytest.mark.parametrize("stop", [1, 7, 8, 14])
def test_resume_from_the_state_dict_continues_exactly(data, stop):
    fn = build_input_fn(config(data))
    whole = ids_of(ResumableIterator(fn))
    first = ResumableIterator(fn)
    given = [np.asarray(next(first)["id"]).tolist() for _ in range(stop)]
    state = json.loads(json.dumps(first.get_state()))
    assert len(json.dumps(state)) < 1024
    assert state["position"] == stop * 4 and state["batches_consumed"] == stop
    again = ResumableIterator(build_input_fn(config(data)))
    again.set_state(state)
    assert given + ids_of(again) == whole


def test_resume_through_a_tf_checkpoint(data, tmp_path):
    fn = build_input_fn(config(data))
    whole = ids_of(ResumableIterator(fn))
    first = ResumableIterator(fn)
    given = [np.asarray(next(first)["id"]).tolist() for _ in range(5)]
    path = tf.train.Checkpoint(iterator=first).save(str(tmp_path / "ckpt"))
    again = ResumableIterator(build_input_fn(config(data)))
    tf.train.Checkpoint(iterator=again).restore(path).assert_consumed()
    assert given + ids_of(again) == whole


@pytest.mark.parametrize("before, after", [(2, 3), (3, 2)])
def test_elastic_restart_loses_and_repeats_nothing(data, before, after):
    """A job of ``before`` pipelines (global batch 12) stops after 2 steps; one of ``after`` pipelines goes on
    from the state any of them saved: together, every record of both epochs exactly once."""
    fn = build_input_fn(config(data, target_batch_size=12))
    old = [ResumableIterator(fn, context(k, before)) for k in range(before)]
    consumed = []
    for _ in range(2):
        for iterator in old:
            consumed += np.asarray(next(iterator)["id"]).tolist()
    states = [iterator.get_state() for iterator in old]
    assert {s["position"] for s in states} == {24}
    rest = []
    for k in range(after):
        iterator = ResumableIterator(fn, context(k, after))
        iterator.set_state(states[k % before])
        rest += flat(ids_of(iterator))
    assert sorted(consumed + rest) == sorted(IDS * 2)
    whole = flat(ids_of(build_input_fn(config(data, target_batch_size=12))()))
    assert sorted(consumed) == sorted(whole[:24])  # the first 24 positions, whoever read them


def test_a_state_of_another_config_or_shape_is_refused(data):
    first = ResumableIterator(build_input_fn(config(data)))
    next(first)
    state = first.get_state()
    other = ResumableIterator(build_input_fn(config(data, epochs=3)))
    with pytest.raises(ResumeError, match=r"\$\.config.*another config"):
        other.set_state(state)
    with pytest.raises(ResumeError, match=r"\$\.position: missing"):
        ResumableIterator(build_input_fn(config(data))).set_state({k: v for k, v in state.items() if k != "position"})
    with pytest.raises(ResumeError, match=r"\$\.seed: found -1"):
        ResumableIterator(build_input_fn(config(data))).set_state({**state, "seed": -1})


def test_start_position_reads_from_there_on(data):
    fn = build_input_fn(config(data))
    whole = flat(ids_of(fn()))
    assert flat(ids_of(fn(start_position=37))) == whole[37:]
    assert fn(start_position=37).cardinality().numpy() == 6  # 23 examples left, batches of 4
    with pytest.raises(ConfigError, match=r"start_position.*expected one of them"):
        fn(start_position=3, skip_batches=1)


@pytest.mark.parametrize("args, found", [
    (dict(shuffle=False), "global with shuffle false"),
    (dict(on_corrupt="skip_file"), "on_corrupt skip_file"),
])
def test_settings_global_cannot_take(data, args, found):
    with pytest.raises(ConfigError, match=rf"\$\.args\.shuffle_scope.*{found}"):
        load_config(config(data, **args))


def test_a_compressed_dataset_is_refused_naming_the_cache_and_reshard(tmp_path):
    d = str(tmp_path / "gz")
    write_manifest(d, [feature("id", "int64", [], "int"), feature("note", "string", [], "string")],
                   compression="gzip")
    write_records(os.path.join(d, "part-0.tfrecords"), [record(0, r) for r in range(3)], compression="gzip")
    with pytest.raises(ConfigError) as caught:
        load_config(config(d))
    (problem,) = caught.value.problems
    assert problem.path == "$.args.shuffle_scope"
    assert problem.message.startswith(f"found global, but the manifest {d}/__manifest__.json says the files are "
                                      "GZIP-compressed: ")
    assert problem.message.endswith("expected a local cache that holds them decompressed (args.dataset.args.cache: "
                                    "{dir: PATH, max_bytes: N}), uncompressed files (`batchloaders reshard SRC DEST "
                                    "--shards N` writes them, indexed), or shuffle_scope buffer")


def test_an_unindexed_dataset_is_refused_naming_the_command(tmp_path):
    d = dataset(tmp_path, indexed=False)
    with pytest.raises(ConfigError, match=r"shuffle_scope.*records no index for 4 data file.*batchloaders index"):
        load_config(config(d))


@pytest.mark.parametrize("damage, said", [
    (lambda path: os.remove(path), "the index file is missing"),
    (lambda path: open(path, "r+b").write(b"X"), "the index file.s SHA-256 is .*, but the manifest records"),
])
def test_a_missing_or_changed_index_is_caught_when_the_pipeline_is_built(tmp_path, damage, said):
    d = dataset(tmp_path)
    damage(os.path.join(d, "part-3.tfrecords.index"))
    with pytest.raises(ManifestError, match=rf"part-3\.tfrecords, index .*part-3\.tfrecords\.index: {said}.*"
                                            r"batchloaders index"):
        build_input_fn(config(d))


def test_a_record_changed_in_place_is_a_data_error_naming_it(tmp_path):
    """The data file keeps its size but a record's frame no longer is where the index says: the read names the
    file and the record."""
    d = dataset(tmp_path)
    path = os.path.join(d, "part-2.tfrecords")
    blob = bytearray(open(path, "rb").read())
    from batchloaders.read.record_index import load_index
    from batchloaders.config.manifest import load_manifest

    offsets = load_index(path, load_manifest(os.path.join(d, "__manifest__.json"))).offsets
    blob[int(offsets[4])] ^= 0xFF  # record 4's length field
    open(path, "wb").write(bytes(blob))
    with pytest.raises(DataError, match=r"part-2\.tfrecords.*record 4.*no record frame"):
        for _ in build_input_fn(config(d, epochs=1))():
            pass


def test_several_pipelines_need_a_seed(data):
    fn = build_input_fn(config(data, seed=None))
    with pytest.raises(ConfigError, match=r"\$\.args\.seed: found null with shuffle_scope global and 2 input pipelines"):
        fn(context(0, 2))
    with pytest.raises(ConfigError, match=r"\$\.args\.seed: found null"):
        ResumableIterator(fn, context(1, 2))
    assert sorted(flat(ids_of(fn()))) == sorted(IDS * 2)  # one pipeline draws its own permutation


def test_a_state_given_back_as_numpy_values_is_taken(data):
    first = ResumableIterator(build_input_fn(config(data)))
    given = [np.asarray(next(first)["id"]).tolist() for _ in range(3)]
    state = {k: (np.str_(v) if isinstance(v, str) else np.int64(v)) for k, v in first.get_state().items()}
    again = ResumableIterator(build_input_fn(config(data)))
    again.set_state(state)
    whole = ids_of(ResumableIterator(build_input_fn(config(data))))
    assert given + ids_of(again) == whole


def test_no_record_to_shuffle_is_a_config_error_not_a_hang(tmp_path):
    d = str(tmp_path / "empty")
    write_manifest(d, [feature("id", "int64", [], "int")])
    write_records(os.path.join(d, "part-0.tfrecords"), [])
    with pytest.raises(SystemExit):
        main(["index", d])
    # Refused when the config is checked (the manifest's counts, written with the index): no endless wait.
    with pytest.raises(ConfigError, match=r"\$\.args\.dataset: the manifest .* lists 0 records in the 1 data file"):
        build_input_fn(config(d, epochs=None))()


def test_a_data_file_cut_during_the_run_is_a_data_error(tmp_path):
    """Built, then the file is cut: the reader's short read names the file and a record."""
    d = dataset(tmp_path)
    # Endless epochs: part-2 is read again whatever the pipeline had buffered before the cut.
    batches = iter(build_input_fn(config(d, epochs=None, num_prefetch=0))())
    next(batches)  # the files are open now
    path = os.path.join(d, "part-2.tfrecords")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(DataError, match=r"part-2\.tfrecords: record \d+: the data file is \d+ bytes, shorter than "
                                        r"the \d+ its index was written for: it was cut while the run read it"):
        for _ in batches:
            pass


def _cut_in_half(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


@pytest.mark.parametrize("when", ["after the file was opened", "before the file was opened"])
def test_the_reader_says_a_file_was_cut_whenever_it_was_cut(tmp_path, when):
    d = dataset(tmp_path)
    path = os.path.join(d, "part-2.tfrecords")
    reader = OffsetReader(load_config(config(d)))
    part2 = np.arange(SIZES[0] + SIZES[1], SIZES[0] + SIZES[1] + SIZES[2])
    if when == "after the file was opened":
        joined, lengths, problem = reader.frames(part2)
        assert problem == b"" and len(joined) == int(lengths.sum()) + FRAME_BYTES * len(part2)
        _cut_in_half(path)
    else:
        _cut_in_half(path)
    joined, _, problem = reader.frames(part2[-1:])
    assert joined == b""
    assert problem.decode() == (f"{path}: record {SIZES[2] - 1}: the data file is {os.path.getsize(path):,} bytes, "
                                f"shorter than the {reader.sizes[2]:,} its index was written for: it was cut while "
                                "the run read it")
