"""The documentation's plugin tutorial, batching-policy and chunking examples run as written: the plugin shown is the
shipped one, the commands succeed, the models train, the chunks reassemble."""
from __future__ import annotations

import os
import re
import shlex

import pytest

from warm import CLI

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def section_blocks(heading: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced block under the section titled ``heading`` (e.g. "## Title": its
    level is the page's own) of README or a page under docs/, up to the next heading of the same or a
    higher level."""
    title = heading.lstrip("#").strip()
    pages = [os.path.join(ROOT, "README.md")] + sorted(
        os.path.join(ROOT, "docs", name) for name in os.listdir(os.path.join(ROOT, "docs")) if name.endswith(".md"))
    for page in pages:
        text = open(page, encoding="utf-8").read()
        found = re.search(rf"^(#+) {re.escape(title)}$", text, re.M)
        if found:
            break
    else:
        raise KeyError(f"no section {title!r} in README or docs/")
    start, level = found.end() + 1, found.group(1)
    # A heading is a line outside fenced blocks (a code block's "# comment" is no heading).
    fenced = {m.start() for m in re.finditer(r"^#", text[start:], re.M)
              if text[start:start + m.start()].count("```") % 2 == 1}
    ends = [m.start() for m in re.finditer(r"^#{1,%d} " % len(level), text[start:], re.M) if m.start() not in fenced]
    body = text[start:start + ends[0]] if ends else text[start:]
    return re.findall(r"```(\w+)\n(.*?)```", body, re.S)


@pytest.fixture(scope="module")
def blocks():
    from batchloaders.demo_data import generate

    generate()  # the tutorial runs "after make demo"
    return section_blocks("## Your own steps and secondary features (plugins)")


def run(warm_python, code, *argv):
    """``python -c code argv...`` from the repository's root (tests/warm.py: TensorFlow imported beforehand)."""
    return warm_python.run(code, argv=argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, timeout=300)


def test_the_plugin_shown_is_the_shipped_plugin(blocks):
    plugin = next(code for lang, code in blocks if lang == "python" and "register_step" in code)
    with open(os.path.join(ROOT, "configs", "plugins", "text_steps.py"), encoding="utf-8") as f:
        assert plugin.strip() in f.read()
    config = next(code for lang, code in blocks if lang == "yaml")
    with open(os.path.join(ROOT, "configs", "chars_plugin.yaml"), encoding="utf-8") as f:
        shipped = f.read()
    for line in config.splitlines():
        if line.strip() != "...":
            assert line.split("#")[0].rstrip() in shipped, line


def test_the_commands_shown_succeed(blocks, warm_python):
    commands = [line for lang, code in blocks if lang == "sh" for line in code.splitlines() if line.strip()]
    assert commands
    for line in commands:
        words = shlex.split(line.split("#")[0])
        assert words[0] == ".venv/bin/batchloaders", line
        done = run(warm_python, CLI, *words[1:])
        assert done.returncode == 0, (line, done.stdout, done.stderr)
    assert "lowercase" in run(warm_python, CLI, "describe", "--trust-plugins", "configs/chars_plugin.yaml").stdout


def test_the_training_code_shown_runs(blocks, warm_python):
    code = next(code for lang, code in blocks if lang == "python" and "model.fit" in code)
    done = run(warm_python, code + "\nimport math\nassert math.isfinite(model.history.history['loss'][-1])\n"
               "print('trained', model.history.history['loss'])")
    assert done.returncode == 0 and "trained" in done.stdout, done.stderr[-2000:]


def test_the_ragged_keras_example_runs(warm_python):
    (code,) = [code for lang, code in section_blocks("### Batching policies per tensor") if lang == "python"]
    done = run(warm_python, code + "\nimport math\nassert math.isfinite(model.history.history['loss'][-1])\n"
               "print('trained', model.history.history['loss'])")
    assert done.returncode == 0 and "trained" in done.stdout, done.stderr[-2000:]


def test_the_chunking_example_runs(warm_python):
    (code,) = [code for lang, code in section_blocks("### Chunking") if lang == "python"]
    done = run(warm_python, code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith(
        "4 sequence(s) cut into 6 chunk(s); 1 last piece(s) shorter than min_size dropped"), done.stdout
