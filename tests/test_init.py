"""``batchloaders init``: a config for each example dataset and for extensionless shards, checked by validate,
shown by describe, built, its first batch compared with the written records, and a model fitted on one."""
from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import build_input_fn
from batchloaders.cli import describe, init
from batchloaders.cli.main import main, validate
from conftest import example, feature, write_manifest, write_records


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from batchloaders.demo_data import generate

    return generate(str(tmp_path_factory.mktemp("demo")))


def records_of(path: str, compression: str | None = None) -> list:
    options = tf.io.TFRecordOptions(compression_type={None: "", "gzip": "GZIP"}[compression])
    return [tf.train.SequenceExample.FromString(r)
            for r in tf.compat.v1.io.tf_record_iterator(path, options)]


def ints(feature_value) -> list[int]:
    return list(feature_value.int64_list.value)


def files_of(directory: str) -> list[str]:
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".tfrecords"))


def run_init(tmp_path, directory, *options) -> tuple[str, str]:
    """Write the config into tmp_path with the CLI; return its path and what was printed on stderr."""
    path = str(tmp_path / "config.yaml")
    err = io.StringIO()
    loader = dict(zip(options[::2], options[1::2]))
    status = init.run(directory, init.Choices(loader=loader.get("--loader", "independent"),
                                             pattern=loader.get("--pattern"), output=path),
                      out=io.StringIO(), err=err)
    assert status == 0, err.getvalue()
    return path, err.getvalue()


def check_chars(directory: str, batch) -> None:
    """Every example is (context, next) of one written record."""
    written = {(tuple(ints(r.context.feature["context"])), ints(r.context.feature["next"])[0])
               for path in files_of(directory) for r in records_of(path)}
    assert batch["context"].shape == (32, 16) and batch["next"].shape == (32,)
    for context, following in zip(batch["context"].tolist(), batch["next"].tolist()):
        assert (tuple(context), following) in written


def check_sentences(directory: str, batch) -> None:
    """Every window is 2 to 4 consecutive sentences of one file: their characters joined, one word count
    each, zeros after."""
    files = [[(bytes(ints(step)[0] for step in r.feature_lists.feature_list["chars"].feature),
               ints(r.context.feature["words"])[0]) for r in records_of(path)] for path in files_of(directory)]
    windows = {(b"".join(c for c, _ in sentences[i:i + k]), tuple(w for _, w in sentences[i:i + k]))
               for sentences in files for k in (2, 3, 4) for i in range(len(sentences) - k + 1)}
    assert batch["chars"].shape[0] == 32 and batch["words"].shape == (32, 4)
    for chars, words in zip(batch["chars"].tolist(), batch["words"].tolist()):
        text = bytes(chars).rstrip(b"\0")
        counts = tuple(w for w in words if w)
        assert (text, counts) in windows
        assert len(chars) - len(text) == batch["chars"].shape[1] - len(text)


def check_stream(directory: str, batch) -> None:
    """Every window is 64 consecutive characters of one file's text."""
    texts = [b"".join(bytes(ints(r.context.feature["text"])) for r in records_of(path, "gzip"))
             for path in files_of(directory)]
    assert batch["text"].shape == (32, 64)
    for window in batch["text"].tolist():
        assert any(bytes(window) in text for text in texts)


@pytest.mark.parametrize("name, loader, check", [
    ("chars", "independent", check_chars),
    ("sentences", "discrete_sequence", check_sentences),
    ("stream", "continuous_sequence", check_stream),  # no manifest: init writes it first
])
def test_example_datasets(demo, tmp_path, name, loader, check):
    directory = os.path.join(demo, name)
    path, err = run_init(tmp_path, directory, "--loader", loader)
    assert os.path.exists(os.path.join(directory, "__manifest__.json"))
    out = io.StringIO()
    assert validate([path], out=out) == 0, out.getvalue()
    described = io.StringIO()
    describe.run(path, described)
    lines = described.getvalue().splitlines()
    assert lines[1:2] == [f"loader: {loader}"] and "batch size: 32 (drop_remainder false; epochs 1)" in lines
    with open(path) as f:
        text = f.read()
    assert "num_read_buffer_bytes: 262144" not in text and "num_prefetch: -1" in text
    assert all(line.startswith(("#", " ", "name:", "type:", "model:", "args:")) for line in text.splitlines())
    batch = next(iter(build_input_fn(path)()))
    check(directory, {k: v.numpy() for k, v in batch.items()})


SHARDS = [f"train-{i:05d}-of-00002" for i in range(2)]


@pytest.fixture
def shards(tmp_path):
    """Two extensionless shards of 20 Examples; record r of shard s has id 100*s + r, x = [id, id + 0.5] and
    label id % 2."""
    d = tmp_path / "shards"
    write_manifest(d, [feature("x", "float32", [2], "float"), feature("label", "int64", [], "int")])
    for s, name in enumerate(SHARDS):
        write_records(d / name, [example(x=("float", [100 * s + r, 100 * s + r + 0.5]), label=("int", [r % 2]))
                                 for r in range(20)])
    return d


def test_extensionless_shards_with_a_pattern(shards, tmp_path):
    path, _ = run_init(tmp_path, str(shards), "--pattern", "train-*-of-*")
    with open(path) as f:
        text = f.read()
    assert 'pattern: "train-*-of-*"' in text
    assert "inputs: [x]" in text and "targets: [label]" in text
    assert "num_shuffle_buffer_elements: 40\n" in text and "num_filenames_shuffle_buffer: 2\n" in text
    batches = list(build_input_fn(path)().as_numpy_iterator())
    assert [len(targets["label"]) for _, targets in batches] == [32, 8]  # epochs 1, remainder kept
    x = np.concatenate([inputs["x"] for inputs, _ in batches])
    label = np.concatenate([targets["label"] for _, targets in batches])
    ids = x[:, 0].astype(int)
    assert sorted(ids.tolist()) == [100 * s + r for s in range(2) for r in range(20)]
    assert (x[:, 1] == x[:, 0] + 0.5).all() and (label == ids % 100 % 2).all()


def test_a_keras_model_fits_an_epoch_per_pass(shards, tmp_path):
    import keras

    path, _ = run_init(tmp_path, str(shards), "--pattern", "train-*-of-*")
    x = keras.Input((2,), name="x")
    model = keras.Model({"x": x}, {"label": keras.layers.Dense(1, name="label")(x)})
    model.compile("adam", keras.losses.BinaryCrossentropy(from_logits=True))
    history = model.fit(build_input_fn(path, model=model)(), epochs=2, verbose=0, shuffle=False)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()  # a pass each


def test_shards_without_a_manifest_get_one_written_with_the_pattern(shards, tmp_path):
    """init writes the manifest first, as `batchloaders manifest --pattern` does, then the config over it."""
    os.remove(shards / "__manifest__.json")
    path, _ = run_init(tmp_path, str(shards), "--pattern", "train-*-of-*")
    with open(shards / "__manifest__.json") as f:
        manifest = json.load(f)
    assert [(e["name"], e["num_records"]) for e in manifest["files"]] == [(name, 20) for name in SHARDS]
    assert {f["name"]: (f["dtype"], f["shape"]) for f in manifest["features"]} == {
        "x": ("float32", [2]), "label": ("int64", [])}  # one value per record: a scalar
    batches = list(build_input_fn(path)().as_numpy_iterator())
    x = np.concatenate([inputs["x"] for inputs, _ in batches])
    assert sorted(x[:, 0].astype(int).tolist()) == [100 * s + r for s in range(2) for r in range(20)]


def test_a_pattern_matching_nothing_is_refused(shards, capsys):
    os.remove(shards / "__manifest__.json")
    with pytest.raises(SystemExit) as stopped:
        main(["init", str(shards), "--pattern", "nothing-*"])
    assert stopped.value.code == 1
    assert capsys.readouterr().err.startswith(f"batchloaders init: error: no data file under {shards}")


def test_prints_to_stdout_and_never_overwrites_without_force(shards, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # printed, data_dir is relative to the working directory
    with pytest.raises(SystemExit) as stopped:
        main(["init", str(shards), "--pattern", "train-*"])
    assert stopped.value.code == 0
    printed = capsys.readouterr()
    assert printed.out.startswith("# Written by `batchloaders init` for 2 data files") and printed.err == ""
    target = tmp_path / "mine.yaml"
    target.write_text("kept\n")
    with pytest.raises(SystemExit) as stopped:
        main(["init", str(shards), "--pattern", "train-*", "-o", str(target)])
    assert stopped.value.code == 1 and target.read_text() == "kept\n"
    assert capsys.readouterr().err == (f"batchloaders init: error: {target} exists: expected a new file (--force "
                                       "replaces it)\n")
    with pytest.raises(SystemExit) as stopped:
        main(["init", str(shards), "--pattern", "train-*", "-o", str(target), "--force"])
    assert stopped.value.code == 0 and target.read_text() == printed.out  # data_dir relative to the file


@pytest.mark.parametrize("options, message", [
    (["--inputs", "xx"], "{manifest}: $.features: found no feature 'xx' (named by --inputs): expected one of x, "
                         "label (did you mean 'x'?)"),
    (["--targets", "lable"], "{manifest}: $.features: found no feature 'lable' (named by --targets): expected one "
                             "of x, label (did you mean 'label'?)"),
    (["--inputs", "x", "--targets", "x"], "<command line>: --targets: found 'x' in both --inputs and --targets: "
                                          "expected each feature in one of them"),
])
def test_an_unknown_feature_is_a_usage_error(shards, capsys, options, message):
    with pytest.raises(SystemExit) as stopped:
        main(["init", str(shards), "--pattern", "train-*", *options])
    assert stopped.value.code == 2
    manifest = shards / "__manifest__.json"
    assert capsys.readouterr().err == "batchloaders init: error: " + message.format(manifest=manifest) + "\n"


def test_an_unknown_loader_is_a_usage_error(shards, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["init", str(shards), "--loader", "sequence"])
    assert stopped.value.code == 2
    assert ("argument --loader: invalid choice: 'sequence' (choose from 'independent', 'continuous_sequence', "
            "'discrete_sequence')") in capsys.readouterr().err
