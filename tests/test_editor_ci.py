"""Editor and CI integration: the pre-commit hook this repository defines, and ``schema --path``.

The hook is run the way pre-commit runs it: its ``entry`` through the console script, given the
repository files its ``files``/``exclude`` patterns select.
"""
from __future__ import annotations

import json
import pathlib
import re
import shlex
import subprocess
import sys

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]


def console_script() -> pathlib.Path:
    script = pathlib.Path(sys.executable).parent / "batchloaders"
    assert script.exists(), f"{script}: the console script is installed with the package (pip install -e .)"
    return script


def hook() -> dict:
    (entry,) = [h for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
                if h["id"] == "batchloaders-validate"]
    return entry


def selected(paths) -> list[str]:
    """The paths pre-commit hands the hook: ``files`` matches and ``exclude`` does not (re.search)."""
    h = hook()
    return [p for p in paths if re.search(h["files"], p) and not re.search(h["exclude"], p)]


def run_hook(files, cwd=REPO) -> subprocess.CompletedProcess:
    command, *args = shlex.split(hook()["entry"])
    assert command == "batchloaders"
    return subprocess.run([str(console_script()), *args, *files], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("path, wanted", [
    ("configs/chars_independent.yaml", True),
    ("configs/plugins/text_steps.py", False),
    ("manifests/chars.manifest.json", True),
    ("data/speech/__manifest__.json", True),
    ("training/loaders/speech.yml", True),
    ("schemas/loader_config.schema.json", False),
    ("configs/loader_config.schema.json", False),
    (".github/workflows/ci.yml", False),
    (".pre-commit-config.yaml", False),
    ("docker-compose.yaml", False),
])
def test_the_hook_selects_configs_and_manifests_not_schemas(path, wanted):
    assert (selected([path]) == [path]) is wanted


@pytest.fixture(scope="module")
def demo_data():
    from batchloaders.demo_data import generate

    generate()  # the example configs point at demo_data/


def test_the_hook_passes_the_example_configs_and_manifests(demo_data):
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    files = selected(tracked)
    assert "configs/chars_independent.yaml" in files and "manifests/chars.manifest.json" in files
    assert not [f for f in files if f.startswith("schemas/")]
    result = run_hook(files)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(line.split(" ", 1)[1] for line in result.stdout.splitlines() if line.startswith("OK ")) == sorted(
        files)


def test_the_hook_fails_a_broken_config_naming_file_line_and_path(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    text = (REPO / "configs" / "chars_independent.yaml").read_text()
    broken = re.sub(r"target_batch_size: \d+", "target_batch_size: -4", text, count=1)
    assert broken != text
    (configs / "broken.yaml").write_text(broken)
    line = next(i for i, t in enumerate(broken.splitlines(), 1) if "target_batch_size: -4" in t)
    result = run_hook(["configs/broken.yaml"], cwd=tmp_path)
    assert result.returncode == 1
    assert (f"configs/broken.yaml: $.args.target_batch_size: expected an integer >= 1, found -4 (line {line}, "
            "column 3)") in result.stdout


def test_the_hook_runs_no_plugin_of_the_configs_it_checks(demo_data, tmp_path):
    """A pull request's config may name a plugin of its own: the hook (and a CI job running the same command)
    checks the rest of it and says what it left unchecked, without running the plugin's code."""
    assert "--trust-plugins" not in hook()["entry"]
    configs = tmp_path / "configs"
    (configs / "plugins").mkdir(parents=True)
    (tmp_path / "demo_data").symlink_to(REPO / "demo_data", target_is_directory=True)  # the config's data
    (configs / "plugins" / "evil.py").write_text("import pathlib\npathlib.Path(__file__).with_name('ran').touch()\n")
    text = (REPO / "configs" / "chars_plugin.yaml").read_text()
    (configs / "pr.yaml").write_text(text.replace("plugins/text_steps.py", "plugins/evil.py"))
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "type: lowercase" in t)
    column = text.splitlines()[line - 1].index("type: lowercase") + 1
    result = run_hook(["configs/pr.yaml"], cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, (
        "note: configs/pr.yaml: $.args.processing_steps[0].type: not checked: plugin type 'lowercase' from "
        f"plugins/evil.py (pass --trust-plugins to import it) (line {line}, column {column})\nOK configs/pr.yaml\n"))
    assert not (configs / "plugins" / "ran").exists()


def test_schema_path_prints_the_installed_schema_directory():
    result = subprocess.run([str(console_script()), "schema", "--path"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    directory = pathlib.Path(result.stdout.strip())
    shipped = json.loads((REPO / "schemas" / "loader_config.schema.json").read_text())
    assert json.loads((directory / "loader_config.schema.json").read_text()) == shipped


def test_schema_without_a_directory_or_path_is_a_usage_error():
    result = subprocess.run([str(console_script()), "schema"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "expected DIR" in result.stderr


@pytest.mark.parametrize("command", [["describe", "--trust-plugins", "configs/chars_plugin.yaml"],
                                     ["check-data", "configs/chars_independent.yaml", "--records", "2"]])
def test_commands_that_import_tensorflow_print_none_of_its_start_up_lines(demo_data, command):
    """describe of a plugin config traces the plugin's step, which imports TensorFlow deep inside."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([str(console_script()), *command], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith("config: configs/chars_plugin.yaml" if command[0] == "describe" else "OK ")


def test_schema_into_the_shipped_folder_leaves_it_whole(capsys):
    """`batchloaders schema schemas` from the repository (the folder the package reads through its link)
    emptied every schema file it had not generated: each was opened for writing before it was read."""
    from batchloaders.cli.main import main

    before = {p.name: p.read_bytes() for p in (REPO / "schemas").glob("*.json")}
    with pytest.raises(SystemExit) as exited:
        main(["schema", str(REPO / "schemas")])
    assert exited.value.code == 0
    after = {p.name: p.read_bytes() for p in (REPO / "schemas").glob("*.json")}
    assert after == before and all(before.values())
