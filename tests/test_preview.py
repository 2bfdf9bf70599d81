"""``python -m batchloaders preview`` on small real datasets: the printed values, padding and failures.

The dataset holds 8 SequenceExamples in 2 files; record n (1..8) has a feature
list ``tokens`` of n steps holding 10n, 10n+1, ..., a context ``label`` n and a
context ``name`` "rn", so every printed value says which record it came from.
"""
from __future__ import annotations

import contextlib
import io
import os
import pathlib
import re
import subprocess
import sys
import threading
import types

import numpy as np
import pytest
import yaml

import batchloaders
from conftest import feature, sequence_example, write_manifest, write_records
from seqdata import write_continuous

REPO = pathlib.Path(__file__).resolve().parents[1]
LENGTHS = [1, 2, 3, 4, 5, 6, 7, 8]
SHUFFLED = {"shuffle": True, "seed": 11, "num_shuffle_buffer_elements": 8, "num_filenames_shuffle_buffer": 2,
            "num_mix_files": 2}
LINE = re.compile(r"^  (?P<role>input|target) (?P<name>\w+): (?P<dtype>\w+) (?P<shape>\[[^\]]*\](?: \w+(?:, \d+ "
                  r"entries)?)?); first example(?:'s entries)? \[(?P<dims>[^\]]*)\]: \[(?P<values>.*)\]$")


def run(*args: str, cwd: pathlib.Path, code: str) -> subprocess.CompletedProcess:
    """``python -c code args`` in ``cwd``: for what must be seen from outside, such as the process ending."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    # The timeout catches a process that never ends, however loaded the machine: not how fast it runs.
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def cli(*args: str, cwd: pathlib.Path) -> types.SimpleNamespace:
    """``batchloaders ARGS`` run in this process (TensorFlow is imported once): returncode, stdout, stderr."""
    from batchloaders.cli.main import main

    stdout, stderr, here = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            main(list(args))
    except SystemExit as exit:
        code = exit.code
    finally:
        os.chdir(here)
    return types.SimpleNamespace(returncode=code, stdout=stdout.getvalue(), stderr=stderr.getvalue())


def write_config(path: pathlib.Path, data_dir: str, loader: str = "independent", primary=("tokens", "label", "name"),
                 inputs=("tokens", "name"), targets=("label",), **args) -> str:
    body = {"dataset": {"type": "dir", "args": {"data_dir": data_dir}}, "target_batch_size": 4,
            "drop_remainder": False, "epochs": None, "num_read_buffer_bytes": 0, "num_prefetch": 1,
            "primary_features": [{"from_name": f, "to_name": f} for f in primary], **args}
    path.write_text(yaml.safe_dump({"type": loader, "model": {"inputs": list(inputs), "targets": list(targets)},
                                    "args": body}))
    return path.name


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """tmp/data (the 8 records) and one config per case, all read from tmp."""
    tmp = tmp_path_factory.mktemp("preview")
    write_manifest(tmp / "data", [feature("tokens", "int64", [], "int", var_len=True),
                                  feature("label", "int64", [], "int", var_len=False),
                                  feature("name", "string", [], "string", var_len=False)], allow_var_len=True)
    records = [sequence_example({"label": ("int", [n]), "name": ("string", [f"r{n}"])},
                                {"tokens": ("int", [[10 * n + j] for j in range(n)])}) for n in LENGTHS]
    write_records(tmp / "data" / "part-0.tfrecords", records[:4])
    write_records(tmp / "data" / "part-1.tfrecords", records[4:])
    write_config(tmp / "padded.yaml", "data", padding=True)
    write_config(tmp / "shuffled.yaml", "data", padding=[{"tensor": "tokens", "value": -1}], **SHUFFLED)
    write_config(tmp / "mixed.yaml", "data", padding=[{"tensor": "tokens", "batching": "ragged"}], **SHUFFLED)
    write_config(tmp / "sparse.yaml", "data", padding=[{"tensor": "tokens", "batching": "sparse"}], **SHUFFLED)
    # One pass of 8 records in batches of 16, the smaller last batch dropped: valid, and no batch at all.
    write_config(tmp / "empty.yaml", "data", padding=True, epochs=1, drop_remainder=True, target_batch_size=16)
    write_manifest(tmp / "nodata", [feature("x", "int64", [], "int")])
    write_records(tmp / "nodata" / "part-0.tfrecords", [])
    write_config(tmp / "nodata.yaml", "nodata", primary=["x"], inputs=["x"], targets=[])
    write_continuous(tmp / "cont", [6, 3])  # 24 and 12 steps: no file holds a window of 50
    write_config(tmp / "short.yaml", "cont", "continuous_sequence", primary=["x"], inputs=["x"], targets=[],
                 min_window=50, max_window=50)
    return tmp


def printed(stdout: str) -> list[dict]:
    """Per batch: {name: the parsed tensor line}."""
    batches = []
    for line in stdout.splitlines():
        if re.match(r"^batch \d+ \(\d+ examples\):$", line):
            batches.append({})
        elif LINE.match(line):
            found = LINE.match(line).groupdict()
            batches[-1][found["name"]] = found
    return batches


def value_list(text: str) -> list:
    return [v.strip("'") if v.startswith("'") else int(v) for v in text.split(", ")]


@pytest.mark.parametrize("config", ["padded.yaml", "mixed.yaml", "sparse.yaml"])
def test_printed_values_are_those_input_fn_yields(workspace, monkeypatch, config):
    """The first example's values, shapes and dtypes of every batch, against the dataset itself."""
    result = cli("preview", config, "-n", "3", cwd=workspace)
    assert result.returncode == 0, result.stderr
    monkeypatch.chdir(workspace)
    expected = list(batchloaders.build_input_fn(config)().take(3))
    got = printed(result.stdout)
    assert len(got) == 3
    for batch, (inputs, targets) in zip(got, expected):
        assert set(batch) == {"tokens", "name", "label"}
        tokens = inputs["tokens"]
        if hasattr(tokens, "row_lengths"):  # ragged
            first = tokens[0].numpy().tolist()
            lengths = tokens.row_lengths().numpy()
            assert batch["tokens"]["shape"] == f"[4, ({lengths.min()}..{lengths.max()})] ragged"
        elif hasattr(tokens, "indices"):  # sparse: the first example's entries
            first = tokens.values.numpy()[tokens.indices.numpy()[:, 0] == 0].tolist()
            assert batch["tokens"]["shape"] == (f"[4, {int(tokens.dense_shape[1])}] sparse, "
                                                f"{len(tokens.values)} entries")
        else:
            first = tokens.numpy()[0].tolist()
            assert batch["tokens"]["shape"] == f"[4, {tokens.shape[1]}]"
        shown = value_list(batch["tokens"]["values"].split(", ...")[0])
        assert shown == first[:8]
        assert batch["tokens"]["role"] == "input" and batch["tokens"]["dtype"] == "int64"
        assert batch["name"] == {"role": "input", "name": "name", "dtype": "string", "shape": "[4]", "dims": "",
                                 "values": repr(inputs["name"].numpy()[0].decode())}
        assert batch["label"] == {"role": "target", "name": "label", "dtype": "int64", "shape": "[4]", "dims": "",
                                  "values": str(targets["label"].numpy()[0])}
        # The values say the record: name rn, label n, tokens 10n, 10n+1, ...
        n = targets["label"].numpy()[0]
        assert shown[0] == 10 * n and batch["name"]["values"] == f"'r{n}'"


@pytest.mark.parametrize("values, shown", [
    (np.arange(10), "[0, 1, 2, 3, 4, 5, 6, 7, ... (+2 more)]"),
    (np.arange(8).reshape(2, 4), "[0, 1, 2, 3, 4, 5, 6, 7]"),
    (np.array([0.5, 1 / 3, -2.0], np.float32), "[0.5, 0.3333, -2]"),
    (np.array([b"ab", "é".encode(), b"\xff"], object), "['ab', 'é', '\\\\xff']"),
    (np.array(True), "[True]"),
    (np.zeros([0]), "[]"),
])
def test_values_are_printed_flat_short_and_decoded(values, shown):
    from batchloaders.cli import preview

    assert preview.format_values(values) == shown


def test_padding_fraction_is_exact(workspace):
    """Unshuffled: batches hold records 1-4 and 5-8, padded to 4 and 8 steps."""
    result = cli("preview", "padded.yaml", "-n", "3", cwd=workspace)
    assert result.returncode == 0, result.stderr
    groups = [LENGTHS[:4], LENGTHS[4:], LENGTHS[:4]]
    real, total = sum(map(sum, groups)), sum(4 * max(g) for g in groups)
    assert (total - real, total) == (18, 64)
    lines = result.stdout.splitlines()
    assert f"  tokens: {(total - real) / total:.4f} (18 / 64)" in lines
    assert "  label: 0 (not padded: fixed shape)" in lines
    assert "  name: 0 (not padded: fixed shape)" in lines


def test_padding_fraction_of_seeded_shuffled_batches_is_that_of_the_shown_batches(workspace, monkeypatch):
    """With a seed the measuring pass sees the batches shown; its count equals the pad value's (-1) count."""
    result = cli("preview", "shuffled.yaml", "-n", "3", cwd=workspace)
    assert result.returncode == 0, result.stderr
    monkeypatch.chdir(workspace)
    batches = [inputs["tokens"].numpy() for inputs, _ in batchloaders.build_input_fn("shuffled.yaml")().take(3)]
    pads, total = sum(int((b == -1).sum()) for b in batches), sum(b.size for b in batches)
    assert f"  tokens: {pads / total:.4f} ({pads} / {total})" in result.stdout.splitlines()
    assert "seed null" not in result.stdout
    assert "  tokens: 0 (not padded: ragged batching)" in cli("preview", "mixed.yaml", cwd=workspace).stdout


def test_random_windows_padding_equals_that_of_the_batches_shown(workspace, monkeypatch):
    """continuous_sequence, windows of 3..9 steps, seeded: padding = elements past each window's length n."""
    write_continuous(workspace / "long", [40, 30])
    write_config(workspace / "windows.yaml", "long", "continuous_sequence", primary=["x", "y"], inputs=["x", "y", "n"],
                 targets=[], min_window=3, max_window=9, padding=True, seed=5,
                 secondary_features=[{"to_name": "n", "type": "length", "args": {"tensor": "y"}}])
    result = cli("preview", "windows.yaml", "-n", "3", cwd=workspace)
    assert result.returncode == 0, result.stderr
    monkeypatch.chdir(workspace)
    batches = list(batchloaders.build_input_fn("windows.yaml")().take(3))
    real = sum(int(b["n"].numpy().sum()) for b in batches)
    total = sum(b["y"].numpy().size for b in batches)
    assert real < total  # the windows differ in length
    lines = result.stdout.splitlines()
    assert f"  y: {(total - real) / total:.4f} ({total - real} / {total})" in lines
    assert f"  x: {(total - real) / total:.4f} ({2 * (total - real)} / {2 * total})" in lines
    from batchloaders.cli.preview import format_values  # its format is tested above; the values are the point

    assert [line for line in lines if line.startswith("  input y: ")] == [
        f"  input y: int64 [4, {y.shape[1]}]; first example [{y.shape[1]}]: {format_values(y[0])}"
        for y in (b["y"].numpy() for b in batches)]


def test_without_a_seed_the_padding_pass_says_it_saw_other_batches(workspace):
    config = yaml.safe_load((workspace / "shuffled.yaml").read_text())
    del config["args"]["seed"]
    (workspace / "unseeded.yaml").write_text(yaml.safe_dump(config))
    result = cli("preview", "unseeded.yaml", "-n", "1", cwd=workspace)
    assert result.returncode == 0, result.stderr
    assert ("  (shuffle with seed null: measured on a second pass, other batches of the same distribution)"
            in result.stdout.splitlines())


def test_packed_rows_padding_is_where_segment_ids_is_0(workspace, monkeypatch):
    """One pass, rows of 10, longest first into the fullest row that holds it: 8+2, 7+3, 6+4 and 5+1."""
    write_config(workspace / "packed.yaml", "data", primary=["tokens"], inputs=["tokens", "segment_ids"], targets=[],
                 padding=True, epochs=1, packing={"length": 10, "tensors": ["tokens"]})
    result = cli("preview", "packed.yaml", "-n", "2", cwd=workspace)
    assert result.returncode == 0, result.stderr
    assert "the dataset ended after 1 batch" in result.stdout
    assert "  tokens: 0.1000 (4 / 40)" in result.stdout.splitlines()
    assert "  segment_ids: 0 (not padded: fixed shape)" in result.stdout.splitlines()
    monkeypatch.chdir(workspace)  # no token value is 0 (they are 10n + j): the rows' zeros are their padding
    rows = [inputs["tokens"].numpy() for inputs in batchloaders.build_input_fn("packed.yaml")()]  # no targets
    assert [int((r == 0).sum()) for r in rows] == [4]


@pytest.mark.parametrize("prefix", ["", "seg_"])
def test_segmented_padding_is_the_steps_past_each_rows_length(workspace, monkeypatch, prefix):
    """Records of 1..8 steps in 2 lanes of num_unroll 3: the first 3 batches' rows hold 1, 2 | 3, 3 | 3, 1 real
    steps (sequence 1 then 3 then 5 in lane 0; 2 then 4 in lane 1): 13 of 18 steps."""
    write_config(workspace / "segmented.yaml", "data", primary=["tokens"], inputs=["tokens"], targets=[],
                 target_batch_size=2, epochs=1, segmenting={"num_unroll": 3, "prefix": prefix})
    result = cli("preview", "segmented.yaml", "-n", "3", cwd=workspace)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line for line in lines if line.startswith(f"  input (counter) {prefix}length: ")] == [
        f"  input (counter) {prefix}length: int32 [2]; first example []: [{n}]" for n in (1, 3, 3)]  # lane 0's rows
    assert lines[lines.index("padding fraction (padded elements / all elements over the first 3 batches, the real "
                             "steps from each segment's length counter):") + 1:] == [f"  tokens: {5 / 18:.4f} (5 / 18)"]
    pytest.importorskip("matplotlib")  # the plot shows each row's length counter against num_unroll
    from batchloaders.cli import preview

    out = io.StringIO()
    monkeypatch.chdir(workspace)
    assert preview.run("segmented.yaml", 3, out, plot="segmented.png") == 0
    assert out.getvalue().splitlines()[-1] == ("plot: segmented.png (tokens: length per example and batch width; "
                                               "padding fraction per batch)")


@pytest.mark.parametrize("small, expected", [
    # Records of 5, 2 and 7 steps, num_unroll 3, 2 lanes: rows of (3, 2), (2, 3), (padding, 3), (padding, 1) real
    # steps; with allow_small_batch the 2 padding rows are left out. y is 1 value per step, x 2.
    (False, ["  y: 0.4167 (10 / 24)", "  x: 0.4167 (20 / 48)"]),
    (True, ["  y: 0.2222 (4 / 18)", "  x: 0.2222 (8 / 36)"]),
])
def test_segmented_padding_counts_every_element_of_a_step_and_leaves_dropped_lanes_out(workspace, monkeypatch, small,
                                                                                       expected):
    write_continuous(workspace / "seqs", [[5, 2, 7]], layout="sequence")  # frame p holds y = p, x = [p, -p]
    write_config(workspace / f"seg{small}.yaml", "seqs", primary=["x", "y"], inputs=["y", "x"], targets=[],
                 target_batch_size=2, epochs=1, segmenting={"num_unroll": 3, "allow_small_batch": small})
    result = cli("preview", f"seg{small}.yaml", "-n", "9", cwd=workspace)
    assert result.returncode == 0, result.stderr
    assert "the dataset ended after 4 batches" in result.stdout
    assert result.stdout.splitlines()[-2:] == expected
    monkeypatch.chdir(workspace)  # frame 0 holds y = 0, a real value equal to the padding: values cannot tell
    zeros = sum(int((b["y"] == 0).sum()) for b in batchloaders.build_input_fn(f"seg{small}.yaml")().as_numpy_iterator())
    assert zeros == int(expected[0].split("(")[1].split(" /")[0]) + 1


@pytest.mark.parametrize("config, message", [
    ("empty.yaml", "empty.yaml: $.args: the dataset yielded no batch (epochs 1, batch size 16, drop_remainder true)"),
    ("nodata.yaml", "nodata.yaml: $.args.epochs: the dataset yielded no batch: epochs is null (repeat forever) but "
                    "a whole pass over the data gave no element"),
    ("short.yaml", "short.yaml: $.args.min_window: a full pass over the 2 data file(s) gave no window: every file "
                   "is shorter than min_window = 50 steps"),
])
def test_a_dataset_without_batches_exits_1_with_the_located_message(workspace, config, message):
    result = cli("preview", config, "--timeout", "600", cwd=workspace)  # these datasets end: a timeout is a hang
    assert result.returncode == 1, result.stdout
    assert result.stdout == ""
    assert result.stderr.startswith(f"batchloaders preview: error: {message}"), result.stderr


def test_an_endless_dataset_that_never_yields_exits_1_within_the_timeout(workspace):
    """epochs null over a dataset that filters everything out: next() would wait forever. That the process
    ends at all (run's timeout catches one that does not) with this message is what shows the guard works."""
    code = ("import sys, tensorflow as tf, batchloaders.input_fn as m\n"
            "m.build_input_fn = lambda c: lambda: tf.data.Dataset.range(1).repeat().filter(lambda x: x < 0)\n"
            "from batchloaders.cli.main import main\n"
            "main(sys.argv[1:])\n")
    result = run("preview", "padded.yaml", "--timeout", "1", cwd=workspace, code=code)
    assert result.returncode == 1
    assert "batchloaders preview: error: padded.yaml: $.args: no batch within 1 s: waiting for batch 1 " in \
        result.stderr, result.stderr


def test_the_timeout_guard_in_process():
    from batchloaders.cli import preview

    never = threading.Event()  # a call that does not return until the test lets it
    try:
        with pytest.raises(preview.NoBatchError, match=r"^x.yaml: \$.args: no batch within 0.1 s: sleeping "):
            preview.within(0.1, never.wait, "sleeping", "x.yaml")
    finally:
        never.set()
    with pytest.raises(KeyError):
        preview.within(5, lambda: {}["k"], "failing", "x.yaml")
    assert preview.within(5, lambda: 3, "returning", "x.yaml") == 3


def test_an_invalid_config_exits_1_and_a_bad_count_2(workspace):
    (workspace / "bad.yaml").write_text((workspace / "padded.yaml").read_text().replace("from_name: label",
                                                                                        "from_name: lable"))
    result = cli("preview", "bad.yaml", cwd=workspace)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("batchloaders preview: error: bad.yaml: $.args.primary_features[1].from_name: ")
    for count in ("0", "-2", "x"):
        result = cli("preview", "padded.yaml", "-n", count, cwd=workspace)
        assert result.returncode == 2
        assert "expected a positive int" in result.stderr


def test_plot_without_matplotlib_prints_one_line_and_exits_1(workspace, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    result = cli("preview", "padded.yaml", "-n", "1", "--plot", "out.png", cwd=workspace)
    assert result.returncode == 1
    assert result.stderr.splitlines() == ['preview --plot needs matplotlib: pip install "batchloaders[plot]"']
    assert result.stdout.startswith("config: padded.yaml\n")  # the text preview came first
    assert not (workspace / "out.png").exists()


@pytest.mark.parametrize("config", ["padded.yaml", "mixed.yaml", "sparse.yaml"])
def test_plot_draws_a_png(workspace, monkeypatch, config):
    pytest.importorskip("matplotlib")
    from batchloaders.cli import preview

    monkeypatch.chdir(workspace)
    out = io.StringIO()
    assert preview.run(config, 2, out, plot=f"{config}.png") == 0
    assert out.getvalue().splitlines()[-1] == (f"plot: {config}.png (tokens: length per example and batch width; "
                                               "padding fraction per batch)")
    assert (workspace / f"{config}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_padded_lengths_for_the_plot_come_from_the_loader(workspace, monkeypatch):
    from batchloaders.config.config import load_config
    from batchloaders.cli import preview

    monkeypatch.chdir(workspace)
    lengths = preview.example_lengths(load_config("padded.yaml"), "tokens", 3)
    assert [x.tolist() for x in lengths] == [LENGTHS[:4], LENGTHS[4:], LENGTHS[:4]]
    assert np.all([x.dtype.kind == "i" for x in lengths])
