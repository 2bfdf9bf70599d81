"""tests/warm.py runs a program as ``python -c`` would: its own process, cwd, environment and exit status."""
from __future__ import annotations

import os
import subprocess

import pytest

from warm import needs_fresh

PROGRAM = """
import os, sys
print(os.getcwd(), os.environ.get("WARM_A"), os.environ.get("WARM_B"), sys.argv[1:], sys.path[0] == "")
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("status", [0, 3])
def test_a_program_gets_its_cwd_environment_arguments_and_exit_status(warm_python, tmp_path, status):
    result = warm_python.run(PROGRAM, argv=[str(status)], cwd=tmp_path, env={"WARM_A": "a", "PATH": "/bin"},
                             timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (
        status, f"{tmp_path} a None ['{status}'] True\n", "to stderr\n")


def test_an_uncaught_exception_exits_1_with_its_traceback(warm_python, tmp_path):
    result = warm_python.run("raise ValueError('from the program')", cwd=tmp_path, env={}, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == "ValueError: from the program"


def test_each_program_has_tensorflows_runtime_to_itself(warm_python, tmp_path):
    """Logical devices can be set only before TensorFlow's context starts: twice in a row, each child starts it."""
    code = ("import tensorflow as tf\n(cpu,) = tf.config.list_physical_devices('CPU')\n"
            "tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 3)\n"
            "print(len(tf.config.list_logical_devices('CPU')))\n")
    for _ in range(2):
        result = warm_python.run(code, cwd=tmp_path, env={}, timeout=60)
        assert (result.returncode, result.stdout) == (0, "3\n"), result.stderr


def test_a_program_past_its_timeout_is_killed_and_the_next_one_runs(warm_python, tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        warm_python.run("import time; time.sleep(60)", cwd=tmp_path, env={}, timeout=1)
    assert warm_python.run("print('next')", cwd=tmp_path, env={}, timeout=60).stdout == "next\n"


@pytest.mark.parametrize("code, fresh", [
    ("import os\nos.environ['KERAS_BACKEND'] = 'jax'\n", True),
    ("import os\nos.putenv('X', '1')\n", True),
    ("import os\nprint(os.path.expanduser('~'))\n", False),
])
def test_a_program_that_sets_the_environment_runs_in_a_fresh_interpreter(warm_python, tmp_path, code, fresh):
    assert needs_fresh(code) == fresh
    probe = code + "import sys\nprint('tensorflow' in sys.modules)\n"
    result = warm_python.run(probe, cwd=tmp_path, env=dict(os.environ), timeout=120)
    assert (result.returncode, result.stdout.splitlines()[-1]) == (0, str(not fresh)), result.stderr


def test_programs_run_fresh_when_the_server_refused_to_start(tmp_path, monkeypatch):
    import warm

    refusing = tmp_path / "refusing_server.py"
    refusing.write_text("import sys\nsys.exit('importing started a thread')\n")
    monkeypatch.setattr(warm, "SERVER", refusing)
    server = warm.WarmPython(dict(os.environ))
    try:
        for _ in range(2):  # the first finds the server gone while it waits; the second before it asks
            result = server.run("import sys\nprint('tensorflow' in sys.modules)", cwd=tmp_path, env=dict(os.environ),
                                timeout=120)
            assert (result.returncode, result.stdout) == (0, "False\n"), result.stderr
    finally:
        server.close()
