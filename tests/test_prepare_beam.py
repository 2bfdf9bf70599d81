"""``manifest``, ``index`` and ``verify`` with ``--runner``: one Apache Beam element per data file runs the same
per-file function as the one-machine command, and what is written or printed is byte-identical.

Runs on the DirectRunner, in-process and with ``direct_running_mode=multi_processing`` (worker processes, each
starting Python and TensorFlow: the costly part of this file, kept to one test per command, with 2 workers for
``manifest``, whose results are merged across them, and 1 for ``index`` and ``verify``).
"""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import batchloaders
from batchloaders.cli import verify, write_index, write_manifest
from batchloaders.errors import ConfigError, DataError
from batchloaders.prepare.beam import BeamNotInstalled, Runner, runner_from
from conftest import example, flip_byte, sequence_example, write_records

pytest.importorskip("apache_beam")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IN_PROCESS = runner_from("DirectRunner")
TWO_PROCESSES = runner_from("DirectRunner", ["direct_running_mode=multi_processing", "direct_num_workers=2"])
ONE_PROCESS = runner_from("DirectRunner", ["direct_running_mode=multi_processing", "direct_num_workers=1"])


def dataset(root: str, sizes=(5, 0, 12, 7)) -> str:
    """Files of unequal sizes (one empty) in two directories; record r of file f says (f, r)."""
    for f, n in enumerate(sizes):
        sub = "a" if f % 2 else "b/c"
        write_records(os.path.join(root, sub, f"part-{f}.tfrecords"),
                      [example(id=("int", [100 * f + r]), note=("string", [b"x" * (r % 5)])) for r in range(n)])
    return root


def twins(tmp_path) -> tuple[str, str]:
    """Two equal datasets: one for the one-machine command, one for the runner."""
    here = dataset(str(tmp_path / "here"))
    there = str(tmp_path / "there")
    shutil.copytree(here, there)
    return here, there


def files_of(root: str) -> dict[str, bytes]:
    out = {}
    for directory, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(directory, name), "rb") as f:
                out[os.path.relpath(os.path.join(directory, name), root)] = f.read()
    return out


def commands(root: str, runners: tuple[Runner | None, ...]) -> list[tuple[int, str]]:
    """manifest, index and verify on ``root``, each with its runner: each one's exit status and stdout (paths
    made relative)."""
    results = []
    for call in (lambda out, err: write_manifest.run_with(root, write_manifest.Choices(runner=runners[0]), out, err),
                 lambda out, err: write_index.run(root, out, err, runner=runners[1]),
                 lambda out, err: verify.run(root, out, err, runner=runners[2])):
        out, err = io.StringIO(), io.StringIO()
        status = call(out, err)
        results.append((status, out.getvalue().replace(root, "ROOT")))
    return results


@pytest.mark.parametrize("runners", [(IN_PROCESS,) * 3, (TWO_PROCESSES, ONE_PROCESS, ONE_PROCESS)],
                         ids=["in-process", "multi-processing"])
def test_the_commands_write_and_print_the_same_with_a_runner(tmp_path, runners):
    here, there = twins(tmp_path)
    without, with_runner = commands(here, (None,) * 3), commands(there, runners)
    assert [status for status, _ in without] == [0, 0, 0]
    assert with_runner == without
    assert files_of(there) == files_of(here)  # the manifest and every index, byte for byte
    assert "part-2.tfrecords.index" in "".join(files_of(there))


def test_a_damaged_file_on_a_worker_is_reported_as_without_a_runner_and_nothing_is_written(tmp_path):
    here, there = twins(tmp_path)
    for root in (here, there):
        path = os.path.join(root, "b", "c", "part-2.tfrecords")
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(flip_byte(data, 60))
    reports = []
    for root, runner in ((here, None), (there, IN_PROCESS)):
        err = io.StringIO()
        status = write_manifest.run_with(root, write_manifest.Choices(runner=runner), io.StringIO(), err)
        lines = [line for line in err.getvalue().replace(root, "ROOT").splitlines() if "error:" in line]
        reports.append((status, lines))
        assert not os.path.exists(os.path.join(root, "__manifest__.json"))
    assert reports[0] == reports[1]
    assert reports[0][0] == 1 and "ROOT/b/c/part-2.tfrecords: record " in reports[0][1][0]
    with pytest.raises(DataError) as raised:
        batchloaders.write_manifest(there, runner="DirectRunner")
    problem = raised.value.problems[0]
    assert problem.file.endswith(os.path.join("b", "c", "part-2.tfrecords")) and problem.path.startswith("record ")
    assert not os.path.exists(os.path.join(there, "__manifest__.json"))


def test_a_file_that_disagrees_with_the_manifest_stops_the_index_on_a_worker(tmp_path):
    root = dataset(str(tmp_path / "d"))
    assert batchloaders.write_manifest(root, runner="DirectRunner").endswith("__manifest__.json")
    with open(os.path.join(root, "__manifest__.json"), "rb") as f:
        manifest = f.read()
    write_records(os.path.join(root, "a", "part-1.tfrecords"), [example(id=("int", [1]), note=("string", [b""]))])
    with pytest.raises(DataError, match=r"part-1\.tfrecords: file: it holds 1 record in .* the manifest lists 0"):
        batchloaders.write_index(root, runner="DirectRunner", beam_options={"direct_num_workers": 1})
    with open(os.path.join(root, "__manifest__.json"), "rb") as f:
        assert f.read() == manifest  # unchanged
    assert not [name for name in files_of(root) if name.endswith(".index")]


def test_the_api_returns_what_it_wrote(tmp_path):
    root = dataset(str(tmp_path / "d"), sizes=(3, 4))
    written = batchloaders.write_index(root, runner="DirectRunner")
    assert [os.path.relpath(p, root) for p in written] == [  # in the order a dir dataset reads the files
        os.path.join("a", "part-1.tfrecords.index"), os.path.join("b", "c", "part-0.tfrecords.index"),
        "__manifest__.json"]


def test_sequence_examples_verify_alike(tmp_path):
    here = str(tmp_path / "s")
    write_records(os.path.join(here, "s.tfrecords"),
                  [sequence_example({"n": ("int", [i])}, {"v": ("float", [[1.0], [2.0]])}) for i in range(4)])
    there = str(tmp_path / "t")
    shutil.copytree(here, there)
    assert commands(there, (IN_PROCESS,) * 3) == commands(here, (None,) * 3)


@pytest.mark.parametrize("name, options, message", [
    (None, ["direct_num_workers=2"], "Beam options without a runner"),
    ("", [], "empty name"),
    ("DirectRunner", ["=2"], "expected KEY=VALUE"),
])
def test_runner_arguments_that_cannot_be_used(name, options, message):
    with pytest.raises(ConfigError, match=message):
        runner_from(name, options)


def test_a_missing_beam_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "apache_beam", None)  # import apache_beam now raises ImportError
    root = dataset(str(tmp_path / "d"), sizes=(2,))
    with pytest.raises(BeamNotInstalled, match=r"pip install 'batchloaders\[beam\]'"):
        batchloaders.write_manifest(root, runner="DirectRunner")
    assert not os.path.exists(os.path.join(root, "__manifest__.json"))


def test_the_command_line_takes_a_runner_and_imports_no_beam_without_one(tmp_path):
    root = dataset(str(tmp_path / "d"), sizes=(2, 3))
    code = textwrap.dedent(f"""
        import sys
        import batchloaders
        from batchloaders.cli.main import main
        assert "apache_beam" not in sys.modules and "tensorflow" not in sys.modules
        try:
            main(["manifest", {root!r}])
        except SystemExit as done:
            assert done.code == 0, done.code
        assert "apache_beam" not in sys.modules, "the one-machine command imported Beam"
        try:
            main(["verify", {root!r}, "--runner", "DirectRunner", "--beam-option", "direct_num_workers=1"])
        except SystemExit as done:
            assert done.code == 0, done.code
        assert "apache_beam" in sys.modules
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, PYTHONPATH=REPO))
    assert result.returncode == 0, result.stderr
    assert "0 of 2 files have problems" in result.stdout
