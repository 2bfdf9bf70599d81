"""TFRecord files as other tools name and lay them out, through ``manifest``, ``init`` and the data checks.

Shards named as TFDS, Beam and the TF models scripts name them are found without a pattern; a pattern that
matches nothing lists the files there and the ``--pattern`` that matches them; ``init`` names tensors so that
Keras takes them, gives a one-value step the shape ``[]``, finds the target of sequence data, takes ``--raw``
and comments every key; a data file the manifest does not list is named by validate, check-data and verify.

Every value says where it came from: in a record of file f, record r, step s, ids are 100 * f + r and step
values 100 * f + r + s / 100. Commands run in-process from tmp_path, so printed paths are relative.
"""
from __future__ import annotations

import io
import json
import os
import shlex

import numpy as np
import pytest
import yaml

from batchloaders import build_input_fn
from batchloaders.cli import init
from batchloaders.cli.main import main
from batchloaders.config.datasets import DEFAULT_PATTERN, pattern_matcher
from conftest import example, feature, loader_config, sequence_example, write_records


def cli(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    """Exit status, stdout lines and stderr lines of one command (progress lines left out)."""
    with pytest.raises(SystemExit) as done:
        main(list(args))
    captured = capsys.readouterr()
    err = [line for line in captured.err.splitlines() if not line.startswith(("verify: ", "manifest: "))]
    return done.value.code, captured.out.splitlines(), err


def numbered(f: int, n: int = 3) -> list[bytes]:
    """Examples r = 0..n-1 of file f: id = 100 * f + r and x = [id, id + 0.5]."""
    return [example(id=("int", [100 * f + r]), x=("float", [100 * f + r, 100 * f + r + 0.5])) for r in range(n)]


def config_init(tmp_path, directory, loader: str = "independent") -> tuple[str, dict, list[str]]:
    """``batchloaders init DIRECTORY --loader LOADER -o c.yaml --force``: the config's text, as data, and what
    was printed on stderr."""
    err = io.StringIO()
    path = tmp_path / "c.yaml"
    status = init.run(str(directory), init.Choices(loader=loader, output=str(path), force=True),
                      out=io.StringIO(), err=err)
    assert status == 0, err.getvalue()
    text = path.read_text()
    return text, yaml.safe_load(text), err.getvalue().splitlines()


def unshuffled(tmp_path) -> str:
    """c.yaml as init wrote it, but for ``shuffle: false`` (records in file order), as u.yaml beside it."""
    text = (tmp_path / "c.yaml").read_text()
    assert text.count("\n  shuffle: true\n") == 1
    (tmp_path / "u.yaml").write_text(text.replace("\n  shuffle: true\n", "\n  shuffle: false\n"))
    return str(tmp_path / "u.yaml")


def comment_of(text: str, line: str) -> str:
    """The comment above ``line`` of a config, its lines joined by spaces."""
    lines = text.splitlines()
    at = lines.index(line)
    above = []
    while at and lines[at - 1].lstrip().startswith("# "):
        at -= 1
        above.insert(0, lines[at].lstrip()[2:])
    return " ".join(above)


def uncommented_keys(text: str) -> list[str]:
    """The lines of a config that set a key (or a list item) without a comment above them or beside them."""
    lines = text.splitlines()
    return [line for i, line in enumerate(lines) if not line.lstrip().startswith("#")
            and "  # " not in line and not (i and lines[i - 1].lstrip().startswith("#"))]


# ------------------------------------------------------------------------------ shard names, no pattern

SHARDS = {
    "TF models (ImageNet, COCO scripts)": ["train-00000-of-00002", "train-00001-of-00002"],
    "TFDS": ["mnist-train.tfrecord-00000-of-00002", "mnist-train.tfrecord-00001-of-00002"],
    "seqio / T5 (c4)": ["c4-train.tfrecord-00000-of-01024", "c4-train.tfrecord-00001-of-01024"],
    "Beam WriteToTFRecord, gzip": ["out-00000-of-00002.gz", "out-00001-of-00002.gz"],
}
# What such directories hold beside the shards: never data files.
SIDE_FILES = ["dataset_info.json", "features.json", "label.labels.txt", "train-00000-of-00002.json",
              "train-00000-of-00002.index", "checkpoint", "README.md"]


@pytest.mark.parametrize("names", SHARDS.values(), ids=SHARDS.keys())
def test_shards_named_as_their_tools_name_them_are_found_without_a_pattern(tmp_path, capsys, monkeypatch, names):
    monkeypatch.chdir(tmp_path)
    compression = "gzip" if names[0].endswith(".gz") else None
    for f, name in enumerate(names):
        write_records(tmp_path / "d" / name, numbered(f), compression)
    for name in SIDE_FILES:
        (tmp_path / "d" / name).write_text("{}\n")
    status, out, err = cli(capsys, "manifest", "d")
    assert (status, err) == (0, [])
    manifest = json.loads((tmp_path / "d" / "__manifest__.json").read_text())
    assert [(e["name"], e["num_records"]) for e in manifest["files"]] == [(name, 3) for name in names]
    assert manifest["compression"] == compression
    _, config, _ = config_init(tmp_path, tmp_path / "d")
    assert "pattern" not in config["args"]["dataset"]["args"]
    batches = list(build_input_fn(str(tmp_path / "c.yaml"))().as_numpy_iterator())
    ids = sorted(int(i) for inputs in batches for i in inputs["id"])
    assert ids == [0, 1, 2, 100, 101, 102]


def test_the_default_pattern_takes_shards_and_leaves_their_neighbours():
    match = pattern_matcher(DEFAULT_PATTERN)
    taken = ["a.tfrecords", "a.tfrecord", "a.tfrec", "a.tfrecord.gz", "a.tfrecords.zz", "sub/dir/a.tfrec",
             "train-00000-of-01024", "validation-00127-of-00128", "mnist-train.tfrecord-00000-of-00001",
             "3.0.1/mnist-test.tfrecord-00000-of-00001", "c4-train.tfrecord-01023-of-01024",
             "coco_train.record-00000-of-00100", "out-00000-of-00002.gz", "out-00000-of-00002.zz"]
    left = ["__manifest__.json", "dataset_info.json", "features.json", "image.image.json", "label.labels.txt",
            "train-00000-of-00002.index", "a.tfrecords.index", "train-00000-of-00002.json", "train-0-of-2",
            "train-000000-of-000002", "train-00000-of-00002.bak", "train.record", "a.tfrecords.bak", "notes.txt",
            "train-0000a-of-00002", "ckpt/step-1.data-00000-of-00001", "model.ckpt-100.data-00001-of-00002"]
    assert [name for name in taken if not match(name)] == []
    assert [name for name in left if match(name)] == []


# ------------------------------------------------------------------------- a pattern that matches nothing

def data_dir_of_other_names(tmp_path, parts: int = 2) -> None:
    for f in range(parts):
        write_records(tmp_path / "d" / f"part_{f}.bin", numbered(f))
    (tmp_path / "d" / "README.md").write_text("not data\n")


def test_no_data_file_lists_the_files_there_and_the_pattern_that_matches_them(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data_dir_of_other_names(tmp_path)
    there = "found 3 other files: 'README.md', 'part_0.bin', 'part_1.bin'; --pattern 'part_*.bin' matches 2 of them"
    for command in ("manifest", "init", "index"):
        status, out, err = cli(capsys, command, "d")
        assert (status, out, err[-1]) == (
            1, [], f"batchloaders {command}: error: no data file under d (files matching {DEFAULT_PATTERN}): {there}")
    assert cli(capsys, "manifest", "d", "--pattern", "*.tfrecords") == (1, [], [
        f"batchloaders manifest: error: no data file under d (files matching *.tfrecords): {there}"])
    # The pattern it names is the one that works.
    status, out, _ = cli(capsys, "manifest", "d", *shlex.split(there.rpartition("; ")[2].split(" matches")[0]))
    size = sum(os.path.getsize(tmp_path / "d" / f"part_{f}.bin") for f in range(2))
    assert status == 0 and out[1] == f"wrote d/__manifest__.json: 2 files, 6 records, {size} bytes"


def test_no_data_file_lists_ten_of_many_files(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data_dir_of_other_names(tmp_path, parts=12)
    (tmp_path / "d" / "sub").mkdir()
    (tmp_path / "d" / "sub" / "part_12.bin").write_bytes(b"")
    first = ", ".join(f"'part_{f}.bin'" for f in (0, 1, 10, 11, 2, 3, 4, 5, 6))
    assert cli(capsys, "manifest", "d") == (1, [], [
        f"batchloaders manifest: error: no data file under d (files matching {DEFAULT_PATTERN}): found 14 other "
        f"files, the first 10: 'README.md', {first}; --pattern '**/part_*.bin' matches 13 of them"])


def test_a_config_whose_pattern_matches_nothing_says_so_in_config_terms(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data_dir_of_other_names(tmp_path)
    (tmp_path / "d" / "__manifest__.json").write_text(json.dumps({"compression": None, "allow_var_len": False,
                                                                   "features": [feature("id", "int64", [], "int")]}))
    (tmp_path / "c.json").write_text(json.dumps(loader_config(tmp_path / "d", [("id", "id")], inputs=["id"])))
    status, out, _ = cli(capsys, "validate", "c.json")
    assert status == 1 and out[0].rpartition(" (line ")[0] == (
        f"c.json: $.args.dataset.args.data_dir: the pattern {DEFAULT_PATTERN!r} matches no file under "
        f"{tmp_path / 'd'}: expected at least one data file (give args.pattern when the files are named otherwise); "
        "found 3 other files: 'README.md', 'part_0.bin', 'part_1.bin'; pattern: \"part_*.bin\" matches 2 of them")


# ------------------------------------------------------------------------------------ init: sequences

def speech(tmp_path, files: int = 2, records: int = 4) -> str:
    """speech/: SequenceExamples as a speech corpus stores them: per step (frame) 3 mfcc values and one energy
    value (float feature lists), and one phone id (an int64 feature list of one value per step, the label).
    Record r of file f has r + 2 frames; frame s holds mfcc [v, v + 0.5, v + 0.25] and energy v, where
    v = 100 * f + r + s / 100, and phone (100 * f + r + s) % 5."""
    for f in range(files):
        write_records(tmp_path / "speech" / f"train-{f:05d}-of-{files:05d}", [sequence_example({}, {
            "mfcc": ("float", [[v, v + 0.5, v + 0.25] for v in (100 * f + r + s / 100 for s in range(r + 2))]),
            "energy": ("float", [[100 * f + r + s / 100] for s in range(r + 2)]),
            "phones": ("int", [[(100 * f + r + s) % 5] for s in range(r + 2)])}) for r in range(records)])
    return str(tmp_path / "speech")


def test_speech_sequences_get_their_label_list_as_target_and_one_value_steps_shape_empty(tmp_path):
    import keras

    text, config, err = config_init(tmp_path, speech(tmp_path))
    manifest = json.loads((tmp_path / "speech" / "__manifest__.json").read_text())
    assert {f["name"]: (f["shape"], f["var_len"]) for f in manifest["features"]} == {
        "energy": ([], True), "mfcc": ([3], True), "phones": ([], True)}
    assert "batchloaders init: guessed: phones: int64 [] per step (an int64_list of 1 value in every step looked " \
           "at)" in err
    assert config["model"] == {"inputs": ["energy", "mfcc"], "targets": ["phones"]}
    assert comment_of(text, "  targets: [phones]") == ("what the model predicts: phones holds one integer per step "
                                                        "beside the float feature lists energy, mfcc: a label per "
                                                        "step; --targets chooses others")
    assert ('    - {from_name: "energy", to_name: "energy"}  # float32 [] per step, a feature list\n'
            '    - {from_name: "mfcc", to_name: "mfcc"}  # float32 [3] per step, a feature list\n'
            '    - {from_name: "phones", to_name: "phones"}  # int64 [] per step, a feature list\n') in text
    assert uncommented_keys(text) == []

    inputs, targets = next(iter(build_input_fn(unshuffled(tmp_path))()))
    assert inputs["mfcc"].shape == (8, 5, 3) and inputs["energy"].shape == (8, 5) and targets["phones"].shape == (8, 5)
    for mfcc, energy, phones in zip(inputs["mfcc"].numpy(), inputs["energy"].numpy(), targets["phones"].numpy()):
        record = int(round(energy[0]))
        steps = record % 100 + 2
        values = record + np.arange(steps) / 100
        np.testing.assert_allclose(energy, np.pad(values, (0, 5 - steps)), rtol=1e-6)
        np.testing.assert_allclose(mfcc[:steps], np.stack([values, values + 0.5, values + 0.25], 1), rtol=1e-6)
        assert phones.tolist() == [(record + s) % 5 for s in range(steps)] + [0] * (5 - steps)

    mfcc, energy = keras.Input((None, 3), name="mfcc"), keras.Input((None,), name="energy")
    frames = keras.layers.Concatenate()([mfcc, keras.layers.Reshape((-1, 1))(energy)])
    model = keras.Model({"mfcc": mfcc, "energy": energy}, {"phones": keras.layers.Dense(5, name="phones")(frames)})
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(build_input_fn(str(tmp_path / "c.yaml"), model=model)(), epochs=2, verbose=0,
                        shuffle=False)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()


def test_a_context_label_of_sequence_data_is_its_target(tmp_path):
    write_records(tmp_path / "utt" / "utt.tfrecords", [sequence_example(
        {"label": ("int", [r % 3])}, {"frames": ("float", [[r + s / 10] for s in range(r + 1)])}) for r in range(4)])
    text, config, _ = config_init(tmp_path, tmp_path / "utt")
    assert config["model"] == {"inputs": ["frames"], "targets": ["label"]}
    assert comment_of(text, "  targets: [label]") == (
        "what the model predicts: the feature named like a label (label, labels, target, targets, y, or ending so "
        "after a /, as image/class/label); --targets chooses others")


def test_sequence_data_without_a_label_gets_a_comment_saying_why(tmp_path):
    """Integer feature lists alone are the input (characters, tokens): no target, and the comment says why."""
    write_records(tmp_path / "text" / "text.tfrecords", [sequence_example(
        {"words": ("int", [r])}, {"chars": ("int", [[97 + s] for s in range(r + 1)])}) for r in range(4)])
    text, config, _ = config_init(tmp_path, tmp_path / "text")
    assert config["model"] == {"inputs": ["chars", "words"], "targets": []}
    assert comment_of(text, "  targets: []") == (
        "no target: no feature is named like a label (label, labels, target, targets, y), and no feature list holds "
        "one integer per step beside float feature lists (a label per step); --targets NAME chooses one (without "
        "targets each batch is the inputs alone, as predict() takes them)")
    assert uncommented_keys(text) == []


@pytest.mark.parametrize("loader", ["continuous_sequence", "discrete_sequence"])
def test_sequence_loaders_comment_every_key_too(tmp_path, loader):
    text, config, _ = config_init(tmp_path, speech(tmp_path), loader)
    assert config["type"] == loader and config["model"]["targets"] == ["phones"]
    assert uncommented_keys(text) == []
    inputs, targets = next(iter(build_input_fn(str(tmp_path / "c.yaml"))()))
    assert targets["phones"].shape[:2] == inputs["energy"].shape[:2]


# ---------------------------------------------------------------------------------- init: tensor names

# Stored names as other tools write them, and the tensor names init gives them.
NAMES = {"image/encoded": "image_encoded_2", "image_encoded": "image_encoded", "image/class/label": "image_class_label",
         "sensor reading": "sensor_reading", "ns:x": "ns_x", "a.b-c": "a.b-c"}


def test_every_tensor_name_init_writes_is_one_keras_takes(tmp_path):
    import keras

    write_records(tmp_path / "n" / "n.tfrecords", [example(**{
        name: ("float", [10 * r + i, 10 * r + i + 0.5]) for i, name in enumerate(NAMES)}, y=("int", [r % 2]))
        for r in range(6)])
    text, config, _ = config_init(tmp_path, tmp_path / "n")
    written = {p["from_name"]: p["to_name"] for p in config["args"]["primary_features"]}
    assert written == {**NAMES, "y": "y"}
    assert config["model"] == {"inputs": [NAMES[n] for n in sorted(NAMES) if n != "image/class/label"],
                               "targets": ["image_class_label", "y"]}  # the label of the TF models scripts' records
    assert comment_of(text, "  primary_features:") == (
        "the features read from the records (from_name, as stored), each the tensor to_name (the stored name, its "
        "characters a Keras name cannot hold, such as /, made _) with the dtype and shape per record the manifest "
        "says")
    for name in written.values():  # every name, inputs and targets: a Keras input or layer may bear it
        assert keras.Input((2,), name=name).name == name
    inputs = {name: keras.Input((2,), name=name) for name in config["model"]["inputs"]}
    joined = keras.layers.Concatenate()(list(inputs.values()))
    model = keras.Model(inputs, {"y": keras.layers.Dense(1, name="y")(joined),
                                 "image_class_label": keras.layers.Dense(2, name="image_class_label")(joined)})
    model.compile("adam", "mse")
    history = model.fit(build_input_fn(str(tmp_path / "c.yaml"), model=model)(), epochs=1, verbose=0, shuffle=False)
    assert np.isfinite(history.history["loss"]).all()
    batch, targets = next(iter(build_input_fn(unshuffled(tmp_path))()))
    for i, (stored, tensor) in enumerate(NAMES.items()):
        if stored == "image/class/label":
            continue
        assert batch[tensor].numpy().tolist() == [[10 * r + i, 10 * r + i + 0.5] for r in range(6)], stored
    assert targets["y"].numpy().tolist() == [0, 1, 0, 1, 0, 1]
    assert targets["image_class_label"].numpy().tolist() == [[10 * r + 2, 10 * r + 2.5] for r in range(6)]


# ------------------------------------------------------------------------------------------- init --raw

def test_init_takes_raw_as_manifest_does_and_its_hint_is_a_command_that_works(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pixels = [bytes((16 * r + k) % 256 for k in range(16)) for r in range(3)]
    write_records(tmp_path / "img" / "img.tfrecords", [example(**{"image/raw": ("string", [pixels[r]]),
                                                                  "label": ("int", [r])}) for r in range(3)])
    status, _, err = cli(capsys, "init", "img")
    hint = next(line for line in err if "probably a raw tensor" in line)
    assert status == 0 and hint.endswith("declare it with --raw 'image/raw=uint8[4,4]'")
    assert cli(capsys, "init", "img", "--raw", "image/raw=uint9") == (2, [], [
        "batchloaders init: error: --raw 'image/raw=uint9': found dtype 'uint9': expected a dtype raw bytes decode "
        "to (uint8, int8, bool, int16, uint16, float16, bfloat16, int32, float32, int64 or float64)"])
    # The manifest is there already: --raw updates it, as `manifest --raw` does.
    status, out, err = cli(capsys, "init", "img", *shlex.split(hint.rpartition("declare it with ")[2]), "-o", "c.yaml")
    assert (status, out) == (0, [])
    assert err[:2] == ["batchloaders init: features kept from the existing manifest: image/raw (raw uint8 [4, 4]) "
                       "from --raw, label", "batchloaders init: wrote img/__manifest__.json: 1 file, 3 records, "
                       f"{os.path.getsize(tmp_path / 'img' / 'img.tfrecords')} bytes"]
    text = (tmp_path / "c.yaml").read_text()
    assert '    - {from_name: "image/raw", to_name: "image_raw"}  # uint8 [4, 4]\n' in text
    inputs, targets = next(iter(build_input_fn(unshuffled(tmp_path))()))
    assert inputs["image_raw"].numpy().tolist() == [np.frombuffer(p, np.uint8).reshape(4, 4).tolist() for p in pixels]
    assert targets["label"].numpy().tolist() == [0, 1, 2]


# ------------------------------------------------------------------------------------- unlisted files

def listed_then_added(tmp_path, capsys, monkeypatch) -> None:
    """d/ with part-0 and part-1 in the manifest `batchloaders manifest d` wrote, then part-2 added; c.json."""
    monkeypatch.chdir(tmp_path)
    for f in range(2):
        write_records(tmp_path / "d" / f"part-{f}.tfrecords", numbered(f))
    assert cli(capsys, "manifest", "d")[0] == 0
    write_records(tmp_path / "d" / "part-2.tfrecords", numbered(2))
    (tmp_path / "c.json").write_text(json.dumps(loader_config("d", [("id", "id")], inputs=["id"])))


UNLISTED = ("data file 'part-2.tfrecords' matches the pattern but is not listed in the files of the manifest "
            "d/__manifest__.json: its records are read but not counted or checked against it (added after the "
            "manifest was written? `batchloaders manifest d` lists it)")
NOT_LISTED = ("d/part-2.tfrecords: not listed in the files of the manifest d/__manifest__.json: it was added after "
              "the manifest was written (run `batchloaders manifest` on the dataset directory)")


def test_validate_warns_of_a_data_file_the_manifest_does_not_list(tmp_path, capsys, monkeypatch):
    listed_then_added(tmp_path, capsys, monkeypatch)
    assert cli(capsys, "validate", "c.json") == (0, [f"warning: c.json: $.args.dataset: {UNLISTED}", "OK c.json"],
                                                 [])
    assert cli(capsys, "validate", "--strict", "c.json") == (1, [
        f"c.json: $.args.dataset: {UNLISTED}", "1 of 1 file invalid (1 problem)"], [])
    (tmp_path / "d" / "part-3.tfrecords").write_bytes(b"")
    status, out, _ = cli(capsys, "validate", "c.json")
    assert (status, out[0][:100]) == (0, "warning: c.json: $.args.dataset: data files 'part-2.tfrecords'; "
                                         "'part-3.tfrecords' match the pattern")


def test_validate_warns_of_each_source_of_a_mixture(tmp_path, capsys, monkeypatch):
    listed_then_added(tmp_path, capsys, monkeypatch)
    write_records(tmp_path / "e" / "part-0.tfrecords", numbered(5))
    assert cli(capsys, "manifest", "e")[0] == 0
    config = loader_config("d", [("id", "id")], inputs=["id"])
    del config["args"]["dataset"], config["args"]["primary_features"]
    config["args"]["sources"] = [{"name": name, "dataset": {"type": "dir", "args": {"data_dir": name}},
                                  "primary_features": [{"from_name": "id", "to_name": "id"}], "weight": 1}
                                 for name in "ed"]
    (tmp_path / "m.json").write_text(json.dumps(config))
    assert cli(capsys, "validate", "m.json") == (0, [f"warning: m.json: $.args.sources[1].dataset: {UNLISTED}",
                                                     "OK m.json"], [])


def test_check_data_and_verify_name_a_data_file_the_manifest_does_not_list(tmp_path, capsys, monkeypatch):
    listed_then_added(tmp_path, capsys, monkeypatch)
    assert cli(capsys, "check-data", "c.json") == (1, [
        "OK d/part-0.tfrecords (3 records checked)", "OK d/part-1.tfrecords (3 records checked)", NOT_LISTED,
        "1 of 3 files have problems"], [])
    for target in ("c.json", "d"):
        assert cli(capsys, "verify", target) == (1, [
            "OK d/part-0.tfrecords (3 records)", "OK d/part-1.tfrecords (3 records)", NOT_LISTED,
            "1 of 3 files have problems"], [])
    assert cli(capsys, "manifest", "d")[0] == 0  # listed now: nothing to say
    assert cli(capsys, "validate", "--strict", "c.json") == (0, ["OK c.json"], [])
    assert cli(capsys, "check-data", "c.json")[0] == 0
