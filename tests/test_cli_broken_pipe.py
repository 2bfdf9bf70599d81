"""A reader that stops early (``batchloaders describe CONFIG | head -1``) ends the command quietly: exit status
141 (128 + SIGPIPE, what a shell reports for any program a closed pipe stopped) and no traceback.

The pipe's reading end is closed before the command writes anything, so its first write fails, every time.
Data: 3 Examples, x = [i, i + 0.5], label = i.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import example, feature, loader_config, write_manifest, write_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipe")
    data = root / "data"
    write_manifest(data, [feature("x", "float32", [2], "float"), feature("label", "int64", [], "int")])
    write_records(data / "a.tfrecords", [example(x=("float", [i, i + 0.5]), label=("int", [i])) for i in range(3)])
    import yaml

    (root / "c.yaml").write_text(yaml.safe_dump(loader_config("data", [("x", "x"), ("label", "label")],
                                                              inputs=["x"], targets=["label"])))
    return root


@pytest.mark.parametrize("args", [["validate", "c.yaml"], ["describe", "c.yaml"], ["preview", "c.yaml", "-n", "1"]],
                         ids=lambda args: args[0])
def test_a_pipe_closed_by_its_reader_ends_the_command_quietly(workspace, args):
    read, write = os.pipe()
    os.close(read)  # the reader has gone before the first line is written
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    try:
        done = subprocess.run([sys.executable, "-m", "batchloaders", *args], cwd=workspace, stdout=write,
                              stderr=subprocess.PIPE, text=True, env={**env, "PYTHONPATH": ROOT}, timeout=300)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")
