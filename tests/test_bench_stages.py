"""``batchloaders bench CONFIG --stages [--step-ms N]``: one epoch timed through the pipeline cut after each
stage, on a small real dataset: 2 files of Examples, 30 + 45 records (record r of file f: id 100 * f + r,
x = [id, id + 0.5, id + 1, id + 1.5]). The config says drop_remainder and epochs null: the cuts still
run one epoch each, every example counted."""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

from conftest import example, feature, write_manifest, write_records

REPO = pathlib.Path(__file__).resolve().parents[1]
PER_FILE = (30, 45)
RECORDS = sum(PER_FILE)
LABELS = ["read", "parse", "secondary features and steps", "regroup, batching and padding"]
NUMBER = r"(\d+\.\d{3})"
STAGE_LINE = re.compile(r"^  (read|parse|secondary features and steps|regroup, batching and padding): "
                        rf"{NUMBER} s +(\d+\.\d)%( within noise \(this cut ran \d+\.\d{{3}} s faster than the one "
                        rf"before\))? \| cut: (\d+) (records|examples) in {NUMBER} s, (\d+\.\d|nan) \6/s$")
# What "change first" names for each stage.
SETTINGS = {"read": "num_parallel_reads", "parse": "num_parallel_parses",
            "secondary features and steps": "the secondary features and processing steps",
            "regroup, batching and padding": "target_batch_size"}


def write_config(directory: pathlib.Path, name: str, **args) -> str:
    body = {"dataset": {"type": "dir", "args": {"data_dir": "data"}}, "target_batch_size": 4,
            "drop_remainder": True, "epochs": None, "num_read_buffer_bytes": 0, "num_prefetch": 1,
            "num_parallel_parses": 1, "primary_features": [{"from_name": "id", "to_name": "id"},
                                                           {"from_name": "x", "to_name": "x"}], **args}
    path = directory / name
    path.write_text(yaml.safe_dump({"type": "independent", "model": {"inputs": ["x"], "targets": ["id"]},
                                    "args": body}))
    return str(path)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("stages")
    write_manifest(root / "data", [feature("id", "int64", [], "int"), feature("x", "float32", [4], "float")])
    for f, count in enumerate(PER_FILE):
        write_records(root / "data" / f"part-{f}.tfrecords",
                      [example(id=("int", [100 * f + r]), x=("float", [100 * f + r + d / 2 for d in range(4)]))
                       for r in range(count)])
    write_config(root, "plain.yaml")
    write_config(root, "shuffled.yaml", shuffle=True, seed=3, num_shuffle_buffer_elements=16,
                 num_filenames_shuffle_buffer=2, num_mix_files=2)
    write_config(root, "steps.yaml", processing_steps=[{"tensor": "x", "type": "cast", "args": {"dtype": "float64"}}])
    return root


def cli(workspace: pathlib.Path, capsys, *args: str) -> tuple[int, str, str]:
    """``batchloaders bench ARGS`` in this process, one round of cuts: (exit status, stdout, stderr)."""
    from batchloaders.cli.main import main

    with pytest.raises(SystemExit) as stopped:
        main(["bench", *args, "--seconds", "0.001"])  # one round
    out, err = capsys.readouterr()
    return stopped.value.code, out, err


def stage_lines(stdout: str) -> list[re.Match]:
    lines = [line for line in stdout.splitlines() if re.match(r"^  [a-z]", line)]
    matches = [STAGE_LINE.match(line) for line in lines]
    assert all(matches), lines
    return matches


def check_report(stdout: str, *, row_unit: str = "examples") -> list[re.Match]:
    stages = stage_lines(stdout)
    assert [m.group(1) for m in stages] == LABELS
    shares = [round(float(m.group(3)) * 10) for m in stages]
    assert sum(shares) == 1000  # tenths of a percent: exactly 100.0%
    assert [int(m.group(5)) for m in stages] == [RECORDS] * 4  # every cut saw every record once
    assert [m.group(6) for m in stages] == ["records", "examples", "examples", row_unit]
    for earlier, stage in zip(stages, stages[1:]):
        # A stage's time: the cut's minus the one before's, 0 and "within noise" when the later cut ran faster.
        cut, before = float(stage.group(7)), float(earlier.group(7))
        assert float(stage.group(2)) == pytest.approx(max(0.0, cut - before), abs=0.0015)
        assert (stage.group(4) is not None) == (cut < before) or abs(cut - before) < 0.0015
    assert float(stages[0].group(2)) == float(stages[0].group(7))
    assert re.search(r"^load average: \d+\.\d\d \d+\.\d\d \d+\.\d\d \(1, 5, 15 min\) on \d+ cores$", stdout, re.M)
    batches = -(-RECORDS // 4)  # the last smaller batch kept
    whole = re.search(rf"^whole pipeline: {NUMBER} s for (\d+) batches, (\d+\.\d{{3}}) ms per batch$", stdout, re.M)
    assert whole and int(whole.group(2)) == batches
    assert float(whole.group(1)) == float(stages[-1].group(7))
    return stages


def test_cli_reports_four_stages_and_says_not_input_bound(workspace):
    """A process of its own, as a user runs it: exit 0, no traceback, the report."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, "-m", "batchloaders", "bench", "plain.yaml", "--stages",
                             "--step-ms", "1e9"], cwd=workspace, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    check_report(result.stdout)
    verdict = [line for line in result.stdout.splitlines() if line.startswith("with --step-ms")]
    assert len(verdict) == 1 and re.match(r"^with --step-ms 1e\+09: not input-bound: a batch takes \d+\.\d{3} ms "
                                          r"to make, a step 1e\+09 ms \(the largest stage is ", verdict[0])
    assert "change first" not in result.stdout
    rounds = int(re.search(r"its fastest of (\d) rounds? \(up to 5 within --seconds 20\)", result.stdout).group(1))
    assert 1 <= rounds <= 5 and f"round {rounds}: timing the four cuts" in result.stderr.splitlines()


def test_a_tiny_step_is_input_bound_and_names_the_largest_stages_setting(workspace, capsys):
    status, out, err = cli(workspace, capsys, str(workspace / "shuffled.yaml"), "--step-ms", "0.000001")
    assert status == 0, err
    stages = check_report(out)
    assert re.search(r"^with --step-ms 1e-06: input-bound: a batch takes \d+\.\d{3} ms to make, a step 1e-06 ms, "
                     r"so each step would wait about \d+\.\d{3} ms for its batch$", out, re.M)
    assert "not input-bound" not in out
    change = re.search(r"^change first: (.+) \((\d+\.\d)% of the time\): (.+)$", out, re.M)
    times = {m.group(1): float(m.group(2)) for m in stages}
    assert change and times[change.group(1)] == max(times.values())
    assert SETTINGS[change.group(1)] in change.group(3)
    assert float(change.group(2)) == float(next(m.group(3) for m in stages if m.group(1) == change.group(1)))


def test_the_steps_stage_runs_the_configs_steps(workspace, capsys):
    status, out, err = cli(workspace, capsys, str(workspace / "steps.yaml"), "--stages")
    assert status == 0, err
    check_report(out)
    assert "    runs: cast on x" in out.splitlines()
    assert "its fastest of 1 round (up to 5 within --seconds 0.001)" in out
    status, out, err = cli(workspace, capsys, str(workspace / "plain.yaml"), "--stages")
    assert status == 0, err
    assert "    runs: nothing (no secondary features or processing steps)" in out.splitlines()
    assert "with --step-ms" not in out


@pytest.mark.parametrize("value", ["0", "-3", "fast", "nan", "inf"])
def test_a_bad_step_time_is_a_usage_error(workspace, capsys, value):
    status, out, err = cli(workspace, capsys, str(workspace / "plain.yaml"), f"--step-ms={value}")
    assert status == 2
    assert f"argument --step-ms: found {value!r}: expected a positive float" in err
    assert out == "" and "Traceback" not in err


def test_shares_add_up_and_a_faster_later_cut_is_within_noise(workspace):
    from batchloaders.cli import stages
    from batchloaders.config.config import load_config

    assert stages.shares([1.0, 1.0, 1.0]) == [33.4, 33.3, 33.3]
    assert stages.shares([0.2, 0.0, 0.0, 0.6]) == [25.0, 0.0, 0.0, 75.0]
    cuts = [stages.Cut(0.5, 8, "records", 1), stages.Cut(1.25, 8, "examples", 2),
            stages.Cut(1.0, 8, "examples", 2), stages.Cut(2.0, 8, "examples", 2)]
    assert stages.stage_seconds(cuts) == [0.5, 0.75, 0.0, 1.0]
    lines = stages.stage_lines(load_config(str(workspace / "plain.yaml")), cuts)
    assert lines[1:] == [
        "  read: 0.500 s  22.2% | cut: 8 records in 0.500 s, 16.0 records/s",
        "  parse: 0.750 s  33.3% | cut: 8 examples in 1.250 s, 6.4 examples/s",
        "  secondary features and steps: 0.000 s   0.0% within noise (this cut ran 0.250 s faster than the one "
        "before) | cut: 8 examples in 1.000 s, 8.0 examples/s",
        "    runs: nothing (no secondary features or processing steps)",
        "  regroup, batching and padding: 1.000 s  44.5% | cut: 8 examples in 2.000 s, 4.0 examples/s",
        "whole pipeline: 2.000 s for 2 batches, 1000.000 ms per batch"]


def test_each_stage_names_the_settings_that_govern_it(workspace):
    from batchloaders.cli import stages
    from batchloaders.config.config import load_config

    config = load_config(str(workspace / "steps.yaml"))
    advice = [stages.what_to_change(config, i) for i in range(4)]
    assert advice == [
        "num_parallel_reads (now AUTOTUNE) and num_read_buffer_bytes (now 0): read more files at once, in larger reads",
        "num_parallel_parses (now 1): parse more blocks at once, up to the cores; or read fewer features "
        "(primary_features)",
        "the secondary features and processing steps (cast on x): simplify or drop the costliest, or store their "
        "results in the data",
        "padding (its shapes and batching policies) and target_batch_size (now 4): pad less, or bucket by length "
        "(bucketing)"]
    assert all(SETTINGS[label] in text for label, text in zip(LABELS, advice))
