"""Resumes that must not be silently wrong (issue 38): a checkpoint of another config names each setting that
differs with its saved and current values, in both modes; a damaged or cut-short checkpoint is a ResumeError
naming its path and what is wrong; the same config goes on with exactly the batches after the saved position.

Data: 3 files of 4 records, record r of file f holds id = 100f + r, read unshuffled in list order.
"""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf

import batchloaders
from batchloaders import ResumableIterator, ResumeError
from batchloaders.runtime.resume import fingerprint
from conftest import example, feature, loader_config, write_manifest, write_records

MODES = ["state", "replay"]


@pytest.fixture(autouse=True)
def _collect_checkpoints():
    """A restore refused halfway leaves TensorFlow objects that warn when garbage-collected: collect them here, so
    that their warnings do not land in a later test's captured log."""
    yield
    import gc

    gc.collect()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("trust")
    write_manifest(root / "parts", [feature("id", "int64", [], "int")])
    for f in range(3):
        write_records(root / "parts" / f"part-{f}.tfrecords", [example(id=("int", [100 * f + r])) for r in range(4)])
    write_records(root / "parts" / "other.tfrecords", [example(id=("int", [900 + r])) for r in range(4)])
    return root


def config(data: pathlib.Path, mode: str, files=("part-0", "part-1", "part-2"), to_name="id", **args) -> dict:
    """The listed files of data/parts, in that order, batches of 4, one epoch, unshuffled; id as ``to_name``."""
    listing = data / f"list-{'-'.join(files)}.txt"
    listing.write_text("".join(f"{data / 'parts' / name}.tfrecords\n" for name in files))
    out = loader_config(data, [("id", to_name)], inputs=[to_name], **{"target_batch_size": 4, "seed": 5,
                                                                  "resume": mode, **args})
    out["args"]["dataset"] = {"type": "list", "args": {"list_file": str(listing),
                                                       "manifest_file": str(data / "parts" / "__manifest__.json")}}
    return out


def ids(batches) -> list[list[int]]:
    return [np.asarray(b["id"]).tolist() for b in batches]


def save_after(data, tmp_path, mode, batches=1, **args) -> str:
    saving = ResumableIterator(batchloaders.build_input_fn(config(data, mode, **args)))
    assert ids(next(saving) for _ in range(batches)) == [[0, 1, 2, 3], [100, 101, 102, 103]][:batches]
    return tf.train.Checkpoint(iterator=saving).save(str(tmp_path / "ckpt"))


def problems(raised) -> list[str]:
    return [str(p) for p in raised.value.problems]


@pytest.mark.parametrize("mode", MODES)
def test_the_same_config_goes_on_with_the_batches_after_the_saved_position(data, tmp_path, mode):
    path = save_after(data, tmp_path, mode, batches=2)
    restored = ResumableIterator(batchloaders.build_input_fn(config(data, mode)))
    tf.train.Checkpoint(iterator=restored).restore(path)
    assert ids(restored) == [[200, 201, 202, 203]]
    assert restored.batches_consumed == 3


OTHER_CONFIGS = [  # (what changes, the lines that name it with its saved and current values)
    (dict(target_batch_size=6), ["<checkpoint>: $.iterator: batch_size: saved 4, now 6",
                                 "<checkpoint>: $.iterator: target_batch_size: saved 4, now 6"]),
    (dict(drop_remainder=True), ["<checkpoint>: $.iterator: drop_remainder: saved false, now true"]),
    (dict(files=("part-0", "part-1")), [
        "<checkpoint>: $.iterator: dataset files: saved 3 files, now 2; the first that differs is file 3: saved "
        "{parts}/part-2.tfrecords, now none",
        '<checkpoint>: $.iterator: dataset.list_file: saved "{data}/list-part-0-part-1-part-2.txt", now '
        '"{data}/list-part-0-part-1.txt"']),
    (dict(files=("part-0", "other", "part-2")), [
        "<checkpoint>: $.iterator: dataset files: saved 3 files, now 3; the first that differs is file 2: saved "
        "{parts}/part-1.tfrecords, now {parts}/other.tfrecords",
        '<checkpoint>: $.iterator: dataset.list_file: saved "{data}/list-part-0-part-1-part-2.txt", now '
        '"{data}/list-part-0-other-part-2.txt"']),
    (dict(to_name="ident"),
     ["<checkpoint>: $.iterator: inputs: differs from the saved one",
      "<checkpoint>: $.iterator: primary_features: differs from the saved one",
      "<checkpoint>: $.iterator: tensors: differs from the saved one"]),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("change,lines", OTHER_CONFIGS)
def test_a_checkpoint_of_another_config_names_each_setting_with_its_saved_and_current_value(
        data, tmp_path, mode, change, lines):
    path = save_after(data, tmp_path, mode)
    other = ResumableIterator(batchloaders.build_input_fn(config(data, mode, **change)))
    tf.train.Checkpoint(iterator=other).restore(path)
    with pytest.raises(ResumeError) as raised:
        next(other)
    got = problems(raised)
    assert got[0].startswith("<checkpoint>: $.iterator: the checkpoint was saved by a pipeline whose ")
    assert got[1:] == [line.format(data=data, parts=data / "parts") for line in lines]


def old_checkpoint(data, tmp_path, **args) -> str:
    """A replay checkpoint as the versions before settings were kept wrote it: {mode, *fingerprint}."""
    input_fn = batchloaders.build_input_fn(config(data, "replay", **args))
    saving = ResumableIterator(input_fn)
    next(saving)
    saving._fingerprint.assign(json.dumps({"mode": "replay", **fingerprint(input_fn.config, 4)}, sort_keys=True))
    return tf.train.Checkpoint(iterator=saving).save(str(tmp_path / "old"))


def test_a_replay_checkpoint_of_an_earlier_version_restores_as_before(data, tmp_path):
    path = old_checkpoint(data, tmp_path)
    restored = ResumableIterator(batchloaders.build_input_fn(config(data, "replay")))
    tf.train.Checkpoint(iterator=restored).restore(path)
    assert ids(restored) == [[100, 101, 102, 103], [200, 201, 202, 203]]
    other = ResumableIterator(batchloaders.build_input_fn(config(data, "replay", drop_remainder=True)))
    tf.train.Checkpoint(iterator=other).restore(old_checkpoint(data, tmp_path / "b"))
    with pytest.raises(ResumeError) as raised:
        next(other)
    assert problems(raised)[1:] == ["<checkpoint>: $.iterator: drop_remainder: differs (the checkpoint keeps no "
                                    "values of its settings: an earlier version of batchloaders saved it)"]


def cut_data_in_half(path: str) -> None:
    data = pathlib.Path(path + ".data-00000-of-00001")
    data.write_bytes(data.read_bytes()[:data.stat().st_size // 2])


def flip_index_byte(path: str) -> None:
    index = pathlib.Path(path + ".index")
    raw = bytearray(index.read_bytes())
    raw[len(raw) // 3] ^= 0xFF
    index.write_bytes(bytes(raw))


def cut_index_in_half(path: str) -> None:
    index = pathlib.Path(path + ".index")
    index.write_bytes(index.read_bytes()[:index.stat().st_size // 2])


def remove(suffix: str):
    def remove_file(path: str) -> None:
        pathlib.Path(path + suffix).unlink()
    remove_file.__name__ = f"remove_{suffix.strip('.').split('-')[0]}"
    return remove_file


DAMAGE = [
    (cut_data_in_half, "its data file (.data-*) holds fewer bytes than its index says: it was cut short (a save "
                       "that was killed, or a copy not finished) (TensorFlow: Read less bytes than requested)"),
    (flip_index_byte, "its index file (.index) cannot be read: it is damaged or cut short (TensorFlow: Unable to "
                      "read file ({path}.index)"),
    (cut_index_in_half, "its index file (.index) cannot be read: it is damaged or cut short (TensorFlow: not an "
                        "sstable (bad magic number))"),
    (remove(".data-00000-of-00001"), "a file of it is missing (TensorFlow: {path}.data-00000-of-00001; No such file "
                                     "or directory)"),
    (remove(".index"), "no checkpoint is there: its index file (.index) is missing (TensorFlow: Error when restoring "
                       "from checkpoint or SavedModel at {path}: Unsuccessful TensorSliceReader constructor: Failed "
                       "to find any matching files for {path})"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("damage,what", DAMAGE)
def test_restore_checkpoint_of_a_damaged_checkpoint_is_a_resume_error_naming_it(data, tmp_path, mode, damage, what):
    path = save_after(data, tmp_path, mode)
    damage(path)
    restored = ResumableIterator(batchloaders.build_input_fn(config(data, mode)))
    with pytest.raises(ResumeError) as raised:
        batchloaders.restore_checkpoint(tf.train.Checkpoint(iterator=restored), path)
    [line] = problems(raised)
    assert line.startswith(f"{path}: $: the checkpoint cannot be read: {what.format(path=path)}")
    assert line.endswith("expected the files of a finished save: restore an earlier checkpoint "
                         "(tf.train.CheckpointManager keeps max_to_keep of them)")


@pytest.mark.parametrize("mode", MODES)
def test_restore_checkpoint_of_a_sound_checkpoint_restores_it(data, tmp_path, mode):
    path = save_after(data, tmp_path, mode)
    restored = ResumableIterator(batchloaders.build_input_fn(config(data, mode)))
    batchloaders.restore_checkpoint(tf.train.Checkpoint(iterator=restored), path)
    assert ids(restored) == [[100, 101, 102, 103], [200, 201, 202, 203]]
    assert batchloaders.restore_checkpoint(tf.train.Checkpoint(iterator=restored), None) is not None  # nothing yet


def test_a_damaged_iterator_state_read_at_the_first_batch_is_a_resume_error_naming_the_checkpoint(data, tmp_path):
    """In state mode the tf.data iterator's state is read when its pipeline is made, at the first batch: a byte
    of it changed after the save is a ResumeError naming the checkpoint, not TensorFlow's DataLossError."""
    shuffled = dict(shuffle=True, num_shuffle_buffer_elements=12, num_filenames_shuffle_buffer=3, num_mix_files=3)
    saving = ResumableIterator(batchloaders.build_input_fn(config(data, "state", **shuffled)))
    next(saving)
    path = tf.train.Checkpoint(iterator=saving).save(str(tmp_path / "ckpt"))
    state = tf.train.load_checkpoint(path).get_variable_to_shape_map()
    assert "iterator/iterator/.ATTRIBUTES/ITERATOR_STATE" in state
    data_file = pathlib.Path(path + ".data-00000-of-00001")
    raw = bytearray(data_file.read_bytes())
    assert len(raw) > 4000  # the shuffle buffer's records: most of the file, its middle among them
    raw[len(raw) // 2] ^= 0xFF
    data_file.write_bytes(bytes(raw))
    restored = ResumableIterator(batchloaders.build_input_fn(config(data, "state", **shuffled)))
    tf.train.Checkpoint(iterator=restored).restore(path)  # (its variables read well: the state waits)
    with pytest.raises(ResumeError) as raised:
        next(restored)
    [line] = problems(raised)
    assert line.startswith(f"{path}: $.iterator.iterator: the checkpoint cannot be read: its bytes are not those "
                           "saved (a checksum does not match): it was damaged after the save (TensorFlow: ")


def plain_iterator(data, **args):
    """The iterator of input_fn()'s dataset, as a user checkpoints it without ResumableIterator."""
    return iter(batchloaders.build_input_fn(config(data, "state", **args))())


def test_a_plain_iterator_checkpoint_resumes_where_it_was_saved(data, tmp_path):
    saving = plain_iterator(data)
    assert ids([next(saving)]) == [[0, 1, 2, 3]]
    path = tf.train.Checkpoint(iterator=saving).save(str(tmp_path / "plain"))
    restored = plain_iterator(data)
    tf.train.Checkpoint(iterator=restored).restore(path)
    assert ids(restored) == [[100, 101, 102, 103], [200, 201, 202, 203]]


@pytest.mark.parametrize("changed, lines", OTHER_CONFIGS[:3], ids=["batch size", "drop_remainder", "fewer files"])
def test_a_plain_iterator_checkpoint_of_another_config_is_refused(data, tmp_path, changed, lines):
    """tf.train.Checkpoint(iterator=iter(dataset)) keeps the pipeline's identity beside tf.data's state: a restore
    into another config used to carry on silently (batch size) or fail in TensorFlow (fewer files)."""
    saving = plain_iterator(data)
    next(saving)
    path = tf.train.Checkpoint(iterator=saving).save(str(tmp_path / "plain"))
    restoring = plain_iterator(data, **changed)
    with pytest.raises(ResumeError) as raised:
        tf.train.Checkpoint(iterator=restoring).restore(path)
    said = problems(raised)
    assert said[0].startswith("<checkpoint>: $.iterator: the checkpoint was saved by a pipeline whose ")
    assert said[1:] == [line.format(parts=data / "parts", data=data) for line in lines]


def test_a_plain_tf_data_checkpoint_is_named_as_such(data, tmp_path):
    path = tf.train.Checkpoint(iterator=iter(tf.data.Dataset.range(3))).save(str(tmp_path / "tfdata"))
    with pytest.raises(ResumeError) as raised:
        batchloaders.restore_checkpoint(tf.train.Checkpoint(iterator=plain_iterator(data)), path)
    assert "its iterator was saved without the pipeline's identity this version keeps" in problems(raised)[0]


def test_an_asynchronous_checkpoint_of_a_plain_iterator_keeps_the_identity(data, tmp_path):
    """An asynchronous save writes a copy of the iterator made on the CPU: it carries the identity too."""
    saving = plain_iterator(data)
    next(saving)
    checkpoint = tf.train.Checkpoint(iterator=saving)
    path = checkpoint.save(str(tmp_path / "async"),
                           options=tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True))
    checkpoint.sync()
    restored = plain_iterator(data)
    tf.train.Checkpoint(iterator=restored).restore(path)
    assert ids(restored) == [[100, 101, 102, 103], [200, 201, 202, 203]]
    with pytest.raises(ResumeError, match="batch_size: saved 4, now 6"):
        tf.train.Checkpoint(iterator=plain_iterator(data, target_batch_size=6)).restore(path)


def test_a_plain_iterator_checkpoint_of_another_seed_is_refused(data, tmp_path):
    """The seed is in the graph: a restore into another seed would go on with other shuffles."""
    saving = plain_iterator(data, shuffle=True, num_shuffle_buffer_elements=4, num_filenames_shuffle_buffer=3,
                            num_mix_files=2)
    next(saving)
    path = tf.train.Checkpoint(iterator=saving).save(str(tmp_path / "seeded"))
    other = plain_iterator(data, shuffle=True, num_shuffle_buffer_elements=4, num_filenames_shuffle_buffer=3,
                           num_mix_files=2, seed=6)
    with pytest.raises(ResumeError) as raised:
        tf.train.Checkpoint(iterator=other).restore(path)
    assert problems(raised)[1:] == ["<checkpoint>: $.iterator: seed: saved 5, now 6"]
