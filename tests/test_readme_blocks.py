"""Every fenced python and sh block in README.md and in every page under docs/ runs as written, from the
repository's root, with HOME set to a temporary directory of the page's own (blocks that keep files between
them, as a tutorial does, write under ``~``: no fixed /tmp path that two runs on one machine would share).

A block that is not meant to run says so on the line before its fence:
``<!-- readme-test: skip: <why> -->``; a block that goes on from the one before it (the same
program) says ``<!-- readme-test: continues the block above -->`` and runs joined to it. A block that needs
an optional module says ``<!-- readme-test: needs: jax -->``: it runs when the module can be imported and is
skipped, saying so, when not (a block continuing it goes with it). sh blocks
run with bash, ``-e``, with the installed ``batchloaders`` command on PATH. Blocks other tests run
with extra checks (test_readme_plugins.py, test_readme_segmenting.py) run here as well: here the
only question is whether they run.

An sh block made only of ``batchloaders`` commands runs them one after another in one Python
process, each line's arguments given to the console script's own function (``cli.main``): every
command as a process of its own (up to 12 of them import TensorFlow) took 47 s of the suite, against 14 s.
What one command leaves in the process is what a program calling ``cli.main`` twice gets: plugin files
stay imported (a later ``--plugins`` still makes their types every config's), and once TensorFlow is
imported quietly ``-v`` cannot show its start-up lines (test_describe_bench.py checks ``-v`` in a
process of its own). The installed console script still runs in the blocks run by bash.

Python programs and those ``batchloaders`` blocks run in a child forked from an interpreter that has
imported TensorFlow already (tests/warm.py): each is still a process of its own, started without the
4-5 s of that import; a program that sets the environment before importing runs in a fresh interpreter.
"""
from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- readme-test: (skip: .+|needs: [\w.]+|continues the block above) -->\s*$")


PAGES = ["README.md"] + sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md"))


def readme_blocks(page: str = "README.md") -> list[tuple[int, str, str, str | None]]:
    """(line, language, code, marker) of every fenced block of ``page``, in order; marker is the text of a
    readme-test comment on the line before the fence, or None."""
    lines = (REPO / page).read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        indent, language, start = fence.group(1), fence.group(2), i
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        marker = MARKER.search(lines[start - 1]) if start else None
        out.append((start + 1, language, "\n".join(body) + "\n", marker.group(1) if marker else None))
        i += 1
    return out


def programs(page: str = "README.md", *, with_needs: bool = False) -> list[tuple]:
    """(first line, language, code) of every python/sh program ``page`` shows, continued blocks joined;
    ``with_needs``: (first line, language, code, the module it needs or None)."""
    out = []
    for line, language, code, marker in readme_blocks(page):
        if language not in ("python", "sh", "bash"):
            continue
        if marker and marker.startswith("skip: "):
            continue
        if marker == "continues the block above":
            assert out and out[-1][1] == language, f"{page} line {line}: continues no {language} block"
            out[-1] = (out[-1][0], language, out[-1][2] + code, out[-1][3])
            continue
        out.append((line, language, code, marker[len("needs: "):] if marker else None))
    return out if with_needs else [program[:3] for program in out]


ALL = [(page, *program) for page in PAGES for program in programs(page, with_needs=True)]


@pytest.mark.parametrize("page", PAGES)
def test_every_block_runs_or_says_why_not(page):
    blocks = [b for b in readme_blocks(page) if b[1] in ("python", "sh", "bash")]
    for line, _, code, marker in blocks:
        assert marker is None or marker.startswith("skip: ") and len(marker) > len("skip: ") + 10 or (
            marker == "continues the block above") or marker.startswith("needs: "), f"{page} line {line}: {marker}"
        if not (marker or "").startswith("skip: "):
            assert "/tmp/" not in code, f"{page} line {line}: a fixed /tmp path (write under ~ instead)"
    assert len(programs(page)) == len(blocks) - sum(1 for b in blocks if b[3] and b[3].startswith("skip: ")) - sum(
        1 for b in blocks if b[3] == "continues the block above")


def test_the_pages_show_programs():
    assert len(ALL) >= 10


IMPORTED = re.compile(r"^(?:import|from)\s+(tensorflow|keras|batchloaders)\b", re.M)
PLUGIN = re.compile(r"^@batchloaders\.register_", re.M)


@pytest.mark.parametrize("page", PAGES)
def test_every_program_imports_batchloaders_before_tensorflow(page):
    """TensorFlow prints its start-up lines when first imported, and then its later native lines (a failed
    cuInit, the TFRecordDataset buffer size) unless TF_CPP_MIN_LOG_LEVEL was set by then: imported after
    ``batchloaders`` it is quiet (runtime/quiet.py). test_the_block_runs_as_written runs the programs with
    TensorFlow imported already (warm.py), so the order is checked here; test_trust_keras.py runs the tutorial in fresh
    processes and finds no TensorFlow line. A plugin module (it registers types) is imported by
    batchloaders, after it."""
    for line, language, code in programs(page):
        first = [m.group(1) for m in IMPORTED.finditer(code)][:1]
        if language == "python" and not PLUGIN.search(code):
            assert first not in (["tensorflow"], ["keras"]), (
                f"{page} line {line}: imports {first[0]} before batchloaders")


@pytest.fixture(scope="module")
def demo_data():
    from batchloaders.demo_data import generate

    generate()  # README's examples read the demo datasets, as after make demo


@pytest.fixture(scope="module")
def homes(tmp_path_factory):
    """A HOME per page, kept across the page's programs (they run in order, in one worker)."""
    made = {}

    def home(page):
        if page not in made:
            made[page] = tmp_path_factory.mktemp("home")
        return made[page]
    return home


@pytest.mark.parametrize("page, line, language, code, needs", ALL, ids=[f"{p[0]}-line-{p[1]}" for p in ALL])
def test_the_block_runs_as_written(demo_data, homes, warm_python, page, line, language, code, needs):
    if needs is not None and importlib.util.find_spec(needs) is None:
        pytest.skip(f"{page} line {line} needs {needs}, which is not installed here")
    env = dict(os.environ, PATH=os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ["PATH"]]),
               HOME=str(homes(page)))
    env.pop("PYTHONPATH", None)
    if language == "python":
        result = warm_python.run(code, cwd=REPO, env=env, timeout=300)
    elif cli_commands(code):
        result = warm_python.run(CLI_RUNNER, argv=[code], cwd=REPO, env=env, timeout=300)
    else:
        result = subprocess.run(["bash", "-e", "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                                timeout=300)
    assert result.returncode == 0, f"{page} line {line}:\n{code}\n--- stderr:\n{result.stderr[-3000:]}"


def cli_commands(code: str) -> list[list[str]]:
    """The argument lists of a block whose every command is ``batchloaders ...`` (else [])."""
    try:
        commands = [shlex.split(line, comments=True) for line in code.splitlines()]
    except ValueError:  # a quote or backslash going on past the line: shell syntax, for bash
        return []
    commands = [argv for argv in commands if argv]
    return commands if commands and all(argv[0] == "batchloaders" for argv in commands) else []


# Runs each line as `bash -e` would: in order, stopping at the first that exits non-zero.
CLI_RUNNER = """
import os, shlex, sys
from batchloaders.cli.main import main
for line in sys.argv[1].splitlines():
    argv = [os.path.expanduser(a) if a.startswith("~/") else a for a in shlex.split(line, comments=True)]
    if not argv:
        continue
    try:
        main(argv[1:])
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    if code != 0:
        sys.exit(f"exit {code}: {line}")
"""


@pytest.mark.parametrize("failing, status", [
    ("batchloaders describe no/such.yaml", 1),  # a BatchLoaderError: exit 1
    ("batchloaders describe --no-such-option x.yaml", 2),  # argparse's usage error
])
def test_cli_runner_stops_at_a_failing_command(tmp_path, failing, status):
    code = f"# a comment line\nbatchloaders --version\n\n{failing}\nbatchloaders --version  # never run\n"
    assert [argv[0] for argv in cli_commands(code)] == ["batchloaders"] * 3
    assert cli_commands("batchloaders --version\nls\n") == []
    assert cli_commands("batchloaders describe 'a.yaml\n") == []  # not shell words line by line: bash runs it
    result = subprocess.run([sys.executable, "-c", CLI_RUNNER, code], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == f"exit {status}: {failing}"
    assert result.stdout.count("batchloaders ") == 1  # the --version line before it ran, the one after did not
    ok = subprocess.run([sys.executable, "-c", CLI_RUNNER, "batchloaders --version\n"], cwd=tmp_path,
                        capture_output=True, text=True, timeout=120)
    assert (ok.returncode, ok.stdout.count("batchloaders ")) == (0, 1)


def test_a_needs_marker_names_the_module_its_block_needs(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("<!-- readme-test: needs: no_such_module_xyz -->\n```python\nimport no_such_module_xyz\n```\n"
                    "<!-- readme-test: continues the block above -->\n```python\nprint(1)\n```\n"
                    "```python\nprint(2)\n```\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert programs("page.md", with_needs=True) == [(2, "python", "import no_such_module_xyz\nprint(1)\n",
                                                     "no_such_module_xyz"), (9, "python", "print(2)\n", None)]
