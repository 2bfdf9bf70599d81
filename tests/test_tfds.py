"""TFDS-prepared data directories, read from TFDS's own description (features.json, dataset_info.json).

Two tiny datasets are built with local ``tfds.core.GeneratorBasedBuilder``s (no download), each split in two
shards. Every value says where it came from: image i (train i = 0..5, test i = 100..103) has the pixel
(37 * i + 8 * y + x + 64 * c) % 256 at row y, column x, channel c, and the label i % 3 (cat, dog, bird); text
record i has the text "t<i>", the tokens 10 * i + 0..i-1 and the tags (i + k) % 2 for k = 0..i-1. TFDS
shuffles records within a split, so tests find a record by its values. Commands run in-process.
"""
from __future__ import annotations

import io
import json
import os
import shutil

import numpy as np
import pytest
import yaml

tfds = pytest.importorskip("tensorflow_datasets")

from batchloaders import build_input_fn, load_config  # noqa: E402
from batchloaders.cli import init  # noqa: E402
from batchloaders.cli.main import main  # noqa: E402
from batchloaders.errors import suggest  # noqa: E402

TRAIN, TEST = range(6), range(100, 104)
CLASSES = ["cat", "dog", "bird"]
SUGGESTED = suggest("tran", ["train", "test"])  # the usual "did you mean" ending


def pixels(i: int) -> np.ndarray:
    y, x, c = np.meshgrid(np.arange(8), np.arange(8), np.arange(3), indexing="ij")
    return ((37 * i + 8 * y + x + 64 * c) % 256).astype(np.uint8)


class TinyImages(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """8x8 PNG images with a ClassLabel of 3 classes; splits train (6) and test (4)."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, supervised_keys=("image", "label"), features=tfds.features.FeaturesDict(
            {"image": tfds.features.Image(shape=(8, 8, 3)), "label": tfds.features.ClassLabel(names=CLASSES)}))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(TRAIN), "test": self._generate_examples(TEST)}

    def _generate_examples(self, ids):
        for i in ids:
            yield i, {"image": pixels(i), "label": i % 3}


class TinyText(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """Text, token lists, tag lists (a Sequence of a ClassLabel) and lists of lists (no manifest form)."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "text": tfds.features.Text(),
            "tokens": tfds.features.Sequence(np.int64),
            "tags": tfds.features.Sequence(tfds.features.ClassLabel(names=["even", "odd"])),
            "nested": tfds.features.Sequence(tfds.features.Sequence(np.int64))}))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(range(1, 5))}

    def _generate_examples(self, ids):
        for i in ids:
            yield i, {"text": f"t{i}", "tokens": [10 * i + k for k in range(i)], "tags": [(i + k) % 2 for k in range(i)],
                      "nested": [[i] * (k + 1) for k in range(i)]}


def prepared(builder_class, data_dir) -> str:
    """The directory ``builder_class`` prepares under ``data_dir`` (TFRecord shards, 2 per split)."""
    builder = builder_class(data_dir=str(data_dir), file_format="tfrecord")
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=2))
    return str(builder.data_dir)


@pytest.fixture(scope="module")
def images_built(tmp_path_factory) -> str:
    return prepared(TinyImages, tmp_path_factory.mktemp("tfds"))


@pytest.fixture(scope="module")
def text_built(tmp_path_factory) -> str:
    return prepared(TinyText, tmp_path_factory.mktemp("tfds"))


@pytest.fixture
def images(images_built, tmp_path) -> str:
    """A copy of the prepared image dataset of the test's own."""
    return shutil.copytree(images_built, tmp_path / "tiny_images")


def cli(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    """Exit status, stdout lines and stderr lines of one command (progress lines left out)."""
    with pytest.raises(SystemExit) as done:
        main(list(args))
    captured = capsys.readouterr()
    err = [line for line in captured.err.splitlines() if not line.startswith(("manifest: ", "verify: "))]
    return done.value.code, captured.out.splitlines(), err


def manifest_of(directory) -> dict:
    with open(os.path.join(directory, "__manifest__.json"), encoding="utf-8") as f:
        return json.load(f)


def test_manifest_of_a_split_from_features_json(images, capsys):
    status, out, err = cli(capsys, "manifest", str(images), "--split", "train")
    assert status == 0, err
    manifest = manifest_of(images)
    assert manifest["allow_var_len"] is False and manifest["compression"] is None
    assert manifest["features"] == [
        {"name": "image", "dtype": "string", "shape": [], "var_len": False, "deserialize_type": "string"},
        {"name": "label", "dtype": "int64", "shape": [], "var_len": False, "deserialize_type": "int",
         "class_names": CLASSES}]
    assert [(f["name"], f["num_records"]) for f in manifest["files"]] == [
        ("tiny_images-train.tfrecord-00000-of-00002", 3), ("tiny_images-train.tfrecord-00001-of-00002", 3)]
    assert out[0].endswith("features.json (TFDS dataset tiny_images, tf.train.Example): image (string []), "
                           "label (int64 [])")
    assert "image: TFDS Image: PNG or JPEG bytes of 8x8x3 pixels (decode_image decodes them)" in out
    assert "label: TFDS ClassLabel: class ids 0 to 2, named in label.labels.txt" in out
    status, out, err = cli(capsys, "manifest", str(images), "--split", "test")
    assert status == 0, err
    assert [(f["name"], f["num_records"]) for f in manifest_of(images)["files"]] == [
        ("tiny_images-test.tfrecord-00000-of-00002", 2), ("tiny_images-test.tfrecord-00001-of-00002", 2)]
    status, out, err = cli(capsys, "validate", os.path.join(images, "__manifest__.json"))
    assert status == 0, err


def test_init_of_a_split_decodes_the_images_and_fits(images, tmp_path):
    import keras

    path = str(tmp_path / "c.yaml")
    err = io.StringIO()
    assert init.run(str(images), init.Choices(output=path, split="train"), out=io.StringIO(), err=err) == 0, err.getvalue()
    text = open(path, encoding="utf-8").read()
    data = yaml.safe_load(text)
    assert data["model"] == {"inputs": ["image"], "targets": ["label"]}
    assert data["args"]["dataset"]["args"]["pattern"] == (
        "tiny_images-train.tfrecord-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]")
    assert data["args"]["processing_steps"] == [
        {"tensor": "image", "type": "decode_image", "args": {"channels": 3, "size": [8, 8], "dtype": "float32"}}]
    assert manifest_of(images)["features"][1]["class_names"] == CLASSES
    assert [f["name"] for f in manifest_of(images)["files"]] == [  # every split's: one manifest serves each
        "tiny_images-test.tfrecord-00000-of-00002", "tiny_images-test.tfrecord-00001-of-00002",
        "tiny_images-train.tfrecord-00000-of-00002", "tiny_images-train.tfrecord-00001-of-00002"]

    # uint8 pixels, for exact values; every record of the train split once, none of test
    exact = tmp_path / "u.yaml"
    exact.write_text(text.replace("dtype: float32}", "dtype: uint8}"))
    seen = {}
    for inputs, targets in build_input_fn(str(exact))().as_numpy_iterator():
        for image, label in zip(inputs["image"], targets["label"]):
            i = next(i for i in list(TRAIN) + list(TEST) if pixels(i)[0, 0, 0] == image[0, 0, 0])
            np.testing.assert_array_equal(image, pixels(i))
            seen[i] = int(label)
    assert seen == {i: i % 3 for i in TRAIN}

    config = load_config(path)
    assert config.tensors["image"].shape == (8, 8, 3)
    image = keras.Input((8, 8, 3), name="image")
    model = keras.Model(image, keras.layers.Dense(3, activation="softmax", name="label")(
        keras.layers.Flatten()(image)))
    model.compile(keras.optimizers.SGD(1e-2), "sparse_categorical_crossentropy")
    history = model.fit(build_input_fn(path, model=model)(), epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()


def test_text_sequences_are_variable_length_and_unknown_types_inferred(text_built, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    directory = shutil.copytree(text_built, tmp_path / "tiny_text")
    status, out, err = cli(capsys, "manifest", "tiny_text")
    assert status == 0, err
    features = {f["name"]: f for f in manifest_of(directory)["features"]}
    assert features["text"] == {"name": "text", "dtype": "string", "shape": [], "var_len": False,
                                "deserialize_type": "string"}
    assert features["tokens"] == {"name": "tokens", "dtype": "int64", "shape": [None], "var_len": False,
                                  "deserialize_type": "int"}
    assert features["tags"] == {"name": "tags", "dtype": "int64", "shape": [None], "var_len": False,
                                "deserialize_type": "int", "class_names": ["even", "odd"]}
    assert "tags: TFDS ClassLabel in a Sequence: class ids 0 to 1, named in tags.labels.txt" in out
    # a Sequence of Sequences is stored as TFDS's ragged parts: said, and inferred from the records
    assert ("batchloaders manifest: tiny_text/features.json: $.featuresDict.features.nested: feature "
            "'nested' is a TFDS Sequence (tensorflow_datasets.core.features.sequence_feature.Sequence), whose values "
            "vary in length on more than the first axis (TFDS stores them as its ragged parts, ragged_flat_values "
            "and ragged_row_lengths_0...): it is inferred from the records instead; check it in the manifest (or declare "
            "it there by hand)") in err
    assert sorted(n for n in features if n.startswith("nested/")) == [
        "nested/ragged_flat_values", "nested/ragged_row_lengths_0"]

    config = {"name": "t", "type": "independent", "model": {"inputs": ["tokens", "text"], "targets": ["tags"]},
              "args": {"dataset": {"type": "dir", "args": {"data_dir": str(directory)}}, "target_batch_size": 4,
                       "drop_remainder": False, "epochs": 1, "num_read_buffer_bytes": 0, "num_prefetch": 1,
                       "shuffle": False, "num_shuffle_buffer_elements": 1, "num_filenames_shuffle_buffer": 1,
                       "num_mix_files": 1, "seed": 1, "padding": True,
                       "primary_features": [{"from_name": n, "to_name": n} for n in ("tokens", "text", "tags")]}}
    (inputs, targets), = build_input_fn(config)().as_numpy_iterator()
    rows = {int(t.decode()[1:]): (list(tokens), list(tags))
            for t, tokens, tags in zip(inputs["text"], inputs["tokens"], targets["tags"])}
    assert rows == {i: ([10 * i + k for k in range(i)] + [0] * (4 - i), [(i + k) % 2 for k in range(i)] + [0] * (4 - i))
                    for i in range(1, 5)}


def test_split_mistakes_are_usage_errors(images, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, _, err = cli(capsys, "manifest", "tiny_images", "--split", "tran")
    assert (status, err) == (2, ["batchloaders manifest: error: tiny_images/dataset_info.json: $.splits: found no "
                                 "split 'tran' (named by --split): expected one of train, test" + SUGGESTED])
    status, _, err = cli(capsys, "manifest", str(images), "--split", "train", "--pattern", "*")
    assert (status, err) == (2, ["batchloaders manifest: error: --split 'train' and --pattern '*' both choose the "
                                 "data files: expected one of them"])
    shutil.copytree(images, tmp_path / "plain", ignore=shutil.ignore_patterns("*.json"))
    status, _, err = cli(capsys, "init", "plain", "--split", "train")
    assert (status, err) == (2, ["batchloaders init: error: --split 'train': plain holds no dataset_info.json and "
                                 "features.json as TFDS writes them: expected a data directory TFDS prepared (--pattern chooses the "
                                 "files of other directories)"])
    assert not os.path.exists(tmp_path / "plain" / "__manifest__.json")


def test_counts_that_disagree_with_dataset_info_are_said(images, capsys):
    info_path = os.path.join(images, "dataset_info.json")
    with open(info_path, encoding="utf-8") as f:
        info = json.load(f)
    info["splits"][0]["shardLengths"] = ["3", "4"]
    with open(info_path, "w", encoding="utf-8") as f:
        json.dump(info, f)
    status, out, err = cli(capsys, "manifest", str(images), "--split", "train")
    assert status == 0, err
    assert ("split train: the files hold 3, 3 records, dataset_info.json says 3, 4: the manifest has the records "
            "counted") in out


def test_features_json_not_as_tfds_writes_it_is_located(images, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open(os.path.join(images, "features.json"), "w", encoding="utf-8") as f:
        f.write('{"featuresDict": {"features": {"image": {"pythonClassName": "x.Sequence", "sequence": 3}}}, '
                '"pythonClassName": "x.FeaturesDict"}')
    status, _, err = cli(capsys, "manifest", "tiny_images")
    assert status == 1
    assert err[0].startswith("batchloaders manifest: error: tiny_images/features.json: $: found a layout other than "
                             "TFDS's (")
    assert err[0].endswith("): expected the JSON TFDS 4 writes")
    assert not os.path.exists(os.path.join(images, "__manifest__.json"))


def test_init_of_a_tfds_directory_needs_a_split(images, tmp_path):
    """Without --split the default pattern would take test and train files into one config."""
    err = io.StringIO()
    assert init.run(str(images), init.Choices(output=str(tmp_path / "c.yaml")), out=io.StringIO(), err=err) == 2
    assert err.getvalue() == (f"batchloaders init: error: {images} holds the splits train, test that TFDS prepared, "
                              "which one config must not mix: expected --split NAME\n")
    assert not (tmp_path / "c.yaml").exists()
