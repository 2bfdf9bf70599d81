"""``python -m batchloaders describe`` and ``bench`` on small real datasets: the printed values.

The padded dataset holds 8 SequenceExamples in 2 files; record i (1..8) has a
feature list ``tokens`` of i steps and a context ``label`` i, so every count
bench prints can be worked out by hand from the fixture lengths.
"""
from __future__ import annotations

import io
import json
import os
import re
import pathlib
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
import yaml

import batchloaders
import warm
from conftest import example, feature, sequence_example, write_manifest, write_records
from seqdata import write_continuous, write_discrete

REPO = pathlib.Path(__file__).resolve().parents[1]
LENGTHS = [1, 2, 3, 4, 5, 6, 7, 8]  # tokens steps of the records, in file and record order


def run(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    """``python -m batchloaders args...`` in ``cwd`` (tests/warm.py: TensorFlow imported beforehand)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return warm.shared().run(warm.CLI, argv=args, cwd=cwd, env=env, timeout=300)


def write_config(path: pathlib.Path, loader: str, data_dir: str, primary, inputs, targets=(), **args) -> str:
    body = {"dataset": {"type": "dir", "args": {"data_dir": data_dir}}, "target_batch_size": 4,
            "drop_remainder": False, "epochs": None, "num_read_buffer_bytes": 0, "num_prefetch": 1,
            "primary_features": [{"from_name": f, "to_name": t} for f, t in primary], **args}
    path.write_text(yaml.safe_dump({"type": loader, "model": {"inputs": list(inputs), "targets": list(targets)},
                                    "args": body}))
    return path.name


def values(stdout: str) -> dict:
    """'key: value' lines (not indented) -> {key: value}."""
    return dict(line.split(": ", 1) for line in stdout.splitlines() if ": " in line and not line.startswith(" "))


@pytest.fixture
def padded(tmp_path):
    """tmp_path/data: the 8 tokens records; tmp_path/padded.yaml: independent, batch 4, padding, forever."""
    data = tmp_path / "data"
    write_manifest(data, [feature("tokens", "int64", [], "int", var_len=True),
                          feature("label", "int64", [], "int", var_len=False)], allow_var_len=True)
    records = [sequence_example({"label": ("int", [n])}, {"tokens": ("int", [[10 * n + j] for j in range(n)])})
               for n in LENGTHS]
    write_records(data / "part-0.tfrecords", records[:4])
    write_records(data / "part-1.tfrecords", records[4:])
    write_config(tmp_path / "padded.yaml", "independent", "data", [("tokens", "tokens"), ("label", "label")],
                 inputs=["tokens"], targets=["label"], padding=True)
    return tmp_path, records


def test_describe_independent_padded(padded):
    tmp_path, _ = padded
    result = run("describe", "padded.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    got = values(result.stdout)
    assert got["loader"] == "independent"
    assert got["data files"].startswith("2 (dir dataset of the files matching **/*{.tfrecords,.tfrecord,.tfrec,"
                                        "-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]}{,.gz,.zz}; "
                                        "manifest ")
    assert "  tensor tokens: int64 [?] (model input)" in lines
    assert "  tensor label: int64 [] (model target)" in lines
    assert "  pad tokens: axis 0 to the batch maximum, with 0" in lines
    assert "  pad label: nothing to pad (fixed shape [])" in lines
    assert got["parsing"].startswith(
        "vectorized: records are batched while serialized and parsed with one parse_example/"
        "parse_sequence_example call per batch; secondary features, steps and padding run on whole batches")
    assert "one tf.io.parse_sequence_example call" in got["parsing"]
    # One source of truth: describe says what the schema (the reference, the editor's hover) says.
    schema = json.loads((REPO / "schemas" / "independent_args.schema.json").read_text())
    said = schema["properties"]["multi_load"]["description"].split(" Defaults to")[0]
    assert got["multi_load"] == f"false: {said}"
    assert said.startswith("Kept for compatibility with the original spec; it changes nothing")
    assert said in (REPO / "docs" / "reference.md").read_text()


def test_describe_fixed_examples_with_multi_load(tmp_path):
    data = tmp_path / "data"
    write_manifest(data, [feature("x", "float32", [3], "float"), feature("id", "int64", [], "int")])
    write_records(data / "part-0.tfrecords", [example(x=("float", [1, 2, 3]), id=("int", [1]))])
    write_config(tmp_path / "c.yaml", "independent", "data", [("x", "x"), ("id", "id")], inputs=["x"],
                 targets=["id"], multi_load=True)
    result = run("describe", "c.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "  tensor x: float32 [3] (model input)" in lines
    assert "padding: none" in lines
    got = values(result.stdout)
    assert got["parsing"].endswith("here: one tf.io.parse_example call, because the manifest has fixed-length "
                                   "features only (records are Examples)")
    assert got["multi_load"].startswith("true: Kept for compatibility with the original spec; it changes nothing")


def test_describe_sequence_loaders(tmp_path):
    write_continuous(tmp_path / "cont", [6, 3])
    write_config(tmp_path / "cont.yaml", "continuous_sequence", "cont", [("x", "x"), ("y", "y")], inputs=["x", "y"],
                 min_window=5, max_window=5)
    write_discrete(tmp_path / "disc", [[(2, 1), (3, 2), (1, 1), (2, 2)]])
    write_config(tmp_path / "disc.yaml", "discrete_sequence", "disc", [("frames", "frames"), ("rid", "rid")],
                 inputs=["frames", "rid"], min_window=2, max_window=3, padding=[{"tensor": "rid", "value": -1}])
    cont = run("describe", "cont.yaml", cwd=tmp_path)
    assert cont.returncode == 0, cont.stderr
    assert "  tensor x: float32 [5, 2] (model input)" in cont.stdout.splitlines()
    assert values(cont.stdout)["windows"].startswith("5 steps, back to back within one file")
    assert values(cont.stdout)["parsing"].startswith(
        "vectorized in blocks: each file is read in blocks of ")
    assert "(4 steps per record)" in values(cont.stdout)["parsing"]
    disc = run("describe", "disc.yaml", cwd=tmp_path)
    assert disc.returncode == 0, disc.stderr
    lines = disc.stdout.splitlines()
    assert "  tensor frames: float32 [?, 2] (model input)" in lines
    assert "  tensor rid: int64 [?] (model input)" in lines
    assert "  pad rid: axis 0 to the batch maximum, with -1" in lines
    assert values(disc.stdout)["windows"].startswith("2..3 whole records (drawn uniformly per window)")
    assert "one tf.io.parse_sequence_example call" in values(disc.stdout)["parsing"]


def test_describe_invalid_config_exits_1(padded):
    tmp_path, _ = padded
    (tmp_path / "bad.yaml").write_text((tmp_path / "padded.yaml").read_text().replace("from_name: label",
                                                                                      "from_name: lable"))
    result = run("describe", "bad.yaml", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("batchloaders describe: error: bad.yaml: $.args.primary_features[1].from_name: ")


def test_bench_counts_and_padding_efficiency(padded):
    tmp_path, records = padded
    result = run("bench", "padded.yaml", "--batches", "5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    got = values(result.stdout)
    assert got["batches"] == "5 (reached --batches 5)"
    assert got["examples"] == "20"
    assert float(got["examples/s"]) > 0 and float(got["batches/s"]) > 0
    # Batches hold records 1-4, 5-8, 1-4, 5-8, 1-4: each padded to its longest record.
    groups = [LENGTHS[:4], LENGTHS[4:]] * 2 + [LENGTHS[:4]]
    real, padded_elements = sum(sum(g) for g in groups), sum(4 * max(g) for g in groups)
    assert (real, padded_elements) == (82, 112)
    line = f"  tokens: {real / padded_elements:.4f} ({real} / {padded_elements})"
    assert line in result.stdout.splitlines()
    assert Fraction(real, padded_elements) == Fraction(41, 56)
    assert "  label:" not in result.stdout  # nothing to pad
    mean = sum(map(len, records)) / len(records)
    assert f"mean serialized record size {mean:.1f} B" in got["read"]
    assert "all 8 records of the 2 data files" in result.stdout
    assert "5/5 batches" in result.stderr  # the progress bar (text mode turns its \r into \n)


NATIVE_LOG = re.compile(r"^(WARNING: All log messages before absl|[IWE]\d{4} |.*cudart_stub|.*oneDNN|To enable the "
                        r"following instructions)")


@pytest.mark.parametrize("verbose", [False, True])
def test_bench_prints_no_tensorflow_start_up_lines_unless_verbose(padded, verbose):
    """The console script, with no TF_CPP_MIN_LOG_LEVEL set: TensorFlow's native lines are ours to hide."""
    tmp_path, _ = padded
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    script = pathlib.Path(sys.executable).parent / "batchloaders"
    result = subprocess.run([str(script), *(["-v"] if verbose else []), "bench", "padded.yaml", "--batches", "3"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    native = [line for line in result.stderr.splitlines() if NATIVE_LOG.match(line)]
    if verbose:  # this machine's TensorFlow announces oneDNN and the missing CUDA driver at import
        assert native, result.stderr
    else:
        assert native == [], result.stderr
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert lines and all(re.match(r"\[[#.]{30}\] \d/3 batches ", line) for line in lines), lines  # the bar


def test_progress_bar_redraws_one_line():
    from batchloaders.cli.bench import Progress

    stream = io.StringIO()
    bar = Progress(stream, total=4, seconds=60)
    bar.update(1, force=True)
    bar.close(4)
    assert "\n" not in stream.getvalue()[:-1]
    assert stream.getvalue().startswith("\r[" + "#" * 7 + "." * 23 + "] 1/4 batches")
    assert stream.getvalue().split("\r")[-1].startswith("[" + "#" * 30 + "] 4/4 batches")


def test_bench_stops_when_the_dataset_ends(padded):
    tmp_path, _ = padded
    config = yaml.safe_load((tmp_path / "padded.yaml").read_text())
    config["args"]["epochs"] = 1
    (tmp_path / "once.yaml").write_text(yaml.safe_dump(config))
    result = run("bench", "once.yaml", "--batches", "5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    got = values(result.stdout)
    assert got["batches"] == "2 (the dataset ended: epochs 1)"
    assert got["examples"] == "8"
    assert "  tokens: 0.7500 (36 / 48)" in result.stdout.splitlines()


def test_bench_continuous_windows_match_the_dataset(tmp_path, monkeypatch):
    """Random window lengths: bench's counts equal those of the very batches the seeded config gives."""
    write_continuous(tmp_path / "cont", [40, 30])
    name = write_config(tmp_path / "cont.yaml", "continuous_sequence", "cont", [("x", "x"), ("y", "y")],
                        inputs=["x", "y", "n"], min_window=3, max_window=9, padding=True, seed=5,
                        secondary_features=[{"to_name": "n", "type": "length", "args": {"tensor": "y"}}])
    result = run("bench", name, "--batches", "6", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    monkeypatch.chdir(tmp_path)
    batches = list(batchloaders.build_input_fn(name)().take(6).as_numpy_iterator())
    lengths = np.concatenate([b["n"] for b in batches])
    padded_y = sum(b["y"].size for b in batches)
    got = values(result.stdout)
    assert got["examples"] == str(len(lengths)) == "24"
    assert f"  y: {lengths.sum() / padded_y:.4f} ({lengths.sum()} / {padded_y})" in result.stdout.splitlines()
    assert f"  x: {lengths.sum() / padded_y:.4f} ({2 * lengths.sum()} / {2 * padded_y})" in result.stdout.splitlines()
    assert f"; {lengths.sum() / 24:.2f} per window)" in result.stdout
    # 4 steps per record: the mean bytes per step is the record bytes over 4 * 70 steps.
    assert "(280 steps)" in result.stdout


def test_bench_rejects_a_non_positive_batch_count(padded):
    tmp_path, _ = padded
    result = run("bench", "padded.yaml", "--batches", "0", cwd=tmp_path)
    assert result.returncode == 2
    assert "expected a positive int" in result.stderr


def discrete_workspace(tmp_path) -> str:
    """One file of 8 records taken 2 at a time: windows hold 5, 3, 5 and 5 frames, every pass the same."""
    write_discrete(tmp_path / "disc", [[(2, 1), (3, 2), (1, 1), (2, 2), (4, 1), (1, 1), (2, 1), (3, 1)]])
    return write_config(tmp_path / "disc.yaml", "discrete_sequence", "disc", [("frames", "frames"), ("rid", "rid")],
                        inputs=["frames", "rid"], min_window=2, max_window=2, padding=True)


def test_bench_discrete_windows(tmp_path):
    result = run("bench", discrete_workspace(tmp_path), "--batches", "3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    got = values(result.stdout)
    assert got["examples"] == "12"
    frames = [5, 3, 5, 5]  # per window; each batch holds these 4 windows, padded to 5 steps of 2 floats
    real, padded_elements = 3 * 2 * sum(frames), 3 * 4 * 5 * 2
    assert f"  frames: {real / padded_elements:.4f} ({real} / {padded_elements})" in result.stdout.splitlines()
    assert "  rid:" not in result.stdout  # [2] per window: nothing to pad
    assert "records in windows: 2.00 per window" in result.stdout


def test_bench_stops_after_the_time_limit(tmp_path):
    result = run("bench", discrete_workspace(tmp_path), "--batches", "100000", "--seconds", "0.001", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert values(result.stdout)["batches"] == "1 (reached --seconds 0.001)"
    assert "one batch: the rates include the start-up" in result.stdout


def test_bench_packing_efficiency(padded):
    """Packed rows report their real-token share: the 8 records (1..8 tokens) packed best fit into rows of 9
    go 8+1, 7+2, 6+3, 5+4: 4 rows of 9, all 36 tokens real; rows of 10 leave 8+2, 7+3, 6+4, 5+1 (36 of 40)."""
    tmp_path, _ = padded
    for length, real, padded_steps in [(9, 36, 36), (10, 36, 40)]:
        write_config(tmp_path / "packed.yaml", "independent", "data", [("tokens", "tokens")], inputs=["tokens"],
                     epochs=1, target_batch_size=1, packing={"length": length, "tensors": ["tokens"]})
        result = run("bench", "packed.yaml", "--batches", "4", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert f"  tokens: {real / padded_steps:.4f} ({real} / {padded_steps})" in result.stdout.splitlines()
        assert "padding efficiency: no output tensor" not in result.stdout
