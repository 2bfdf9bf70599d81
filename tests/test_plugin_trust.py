"""A config is data: checking one runs none of its plugins' code unless asked, its plugin paths stay inside
its folder, and threads that load the same plugin file all get its types.

Data and plugin: test_plugins.py's project (2 files x 3 SequenceExamples, frames of record n = [v, -v] with
v = 100 n + 0, 1, ...; my_steps.py registers scale, drop_first and energy). The plugin here also writes
the file ``ran`` beside itself when imported: whether that file exists is whether its code ran.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from batchloaders import ConfigError, PluginsNotChecked, build_input_fn, load_config
from batchloaders.transform.registry import STEPS
from test_plugins import PLUGIN, ROOT, config, frames_of, padded, project, registry_scope  # noqa: F401

MARKS_ITS_RUN = "import pathlib\npathlib.Path(__file__).with_name('ran').write_text('imported')\n"
SCALED = [{"tensor": "frames", "type": "scale", "args": {"factor": 2}}]


def run_cli(cwd, *args):
    """The command line as a user runs it: TensorFlow's start-up lines hidden by batchloaders itself."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run([sys.executable, "-m", "batchloaders", *args], cwd=cwd, capture_output=True, text=True,
                          env={**env, "PYTHONPATH": ROOT}, timeout=300)


def registered_at(path, name: str) -> int:
    """The line of the register_step call of ``name`` in a plugin file."""
    lines = path.read_text().splitlines()
    return next(i for i, t in enumerate(lines, 1) if f'register_step("{name}"' in t)


@pytest.fixture
def marked(project):
    """The project, its plugin writing ``ran`` when imported, and a config c.yaml naming it for one step."""
    (project / "my_steps.py").write_text(MARKS_ITS_RUN + PLUGIN.format(prefix=""))
    config(project, steps=SCALED)
    return project


NOTICE = ("c.yaml: $.args.processing_steps[0].type: not checked: plugin type 'scale' from my_steps.py (pass "
          "--trust-plugins to import it) (line {line}, column {column})")


def notice_at(project) -> dict:
    """Line and column of the first step's type in c.yaml (as yaml.safe_dump laid it out)."""
    lines = (project / "c.yaml").read_text().splitlines()
    line = next(i for i, t in enumerate(lines, 1) if "type: scale" in t)
    return {"line": line, "column": lines[line - 1].index("type") + 1}


# (command line, exit status, stdout, stderr, whether the plugin ran); {notice} is NOTICE.
COMMANDS = [
    (["validate", "c.yaml"], 0, "note: {notice}\nOK c.yaml\n", "", False),
    (["validate", "."], 0, "note: ./{notice}\nOK ./c.yaml\n", "", False),
    (["validate", "--strict-plugins", "c.yaml"], 1, "{notice}\n1 of 1 file invalid (1 problem)\n", "", False),
    (["describe", "c.yaml"], 1, "", "batchloaders describe: error: {notice}\n", False),
    (["validate", "--trust-plugins", "c.yaml"], 0, "OK c.yaml\n", "", True),
    (["validate", "--plugins", "my_steps.py", "c.yaml"], 0, "OK c.yaml\n", "", True),  # named: the user's choice
]


@pytest.mark.parametrize("args, status, out, err, ran", COMMANDS, ids=[" ".join(c[0]) for c in COMMANDS])
def test_the_command_line_runs_a_configs_plugin_only_when_asked(marked, args, status, out, err, ran):
    done = run_cli(marked, *args)
    notice = NOTICE.format(**notice_at(marked))
    assert (done.returncode, done.stdout, done.stderr) == (status, out.format(notice=notice), err.format(
        notice=notice))
    assert (marked / "ran").exists() is ran


def test_describe_with_trust_plugins_imports_and_describes_the_plugin_step(marked):
    done = run_cli(marked, "describe", "--trust-plugins", "c.yaml")
    assert done.returncode == 0, done.stderr
    # The plugin's file relative to the working directory (the project), its function and the line registering it.
    origin = f"my_steps.py: function scale, line {registered_at(marked / 'my_steps.py', 'scale')}"
    assert f"  step scale on frames: float32 [?, 2] -> float32 [?, 2] (plugin: {origin})" in \
        done.stdout.splitlines()
    assert (marked / "ran").read_text() == "imported"


def test_untrusted_every_other_part_is_checked(marked, registry_scope):
    """The plugin's items are set aside; the rest of the config is judged as usual, nothing is imported."""
    steps = SCALED + [{"tensor": "framez", "type": "scale", "args": {"factor": 3}}, {"type": "scale"}]
    path = config(marked, steps=steps, secondary=[{"to_name": "energy", "type": "energy", "args": {}}],
                  inputs=("frames", "energy"), target_batch_size=0)
    with pytest.raises(ConfigError) as caught:
        load_config(path, trust_plugins=False)
    assert type(caught.value) is ConfigError
    assert [(p.path, p.message) for p in caught.value.problems] == [
        ("$.args.processing_steps[2]", "missing required key 'tensor'"),
        ("$.args.target_batch_size", "expected an integer >= 1, found 0"),
        ("$.args.processing_steps[1].tensor", "tensor 'framez' is not a primary or secondary feature (did you mean "
                                              "'frames'?); expected one of: frames, label, energy"),
    ]
    assert not (marked / "ran").exists() and STEPS.get("scale") is None


def test_untrusted_a_valid_config_names_each_item_left_unchecked(marked, registry_scope):
    path = config(marked, steps=SCALED + [{"tensor": "frames", "type": "drop_first"}],
                  secondary=[{"to_name": "energy", "type": "energy", "args": {"tensor": "frames"}}],
                  inputs=("frames", "energy"))
    with pytest.raises(PluginsNotChecked) as caught:
        load_config(path, trust_plugins=False)
    assert [(p.path, p.message) for p in caught.value.problems] == [
        (f"$.args.{where}.type", f"not checked: plugin type {name!r} from my_steps.py (pass --trust-plugins to "
                                 "import it)")
        for where, name in (("secondary_features[0]", "energy"), ("processing_steps[0]", "scale"),
                            ("processing_steps[1]", "drop_first"))]
    assert not (marked / "ran").exists()
    assert load_config(path).processing_steps[0].type == "scale"  # a program's own call imports it
    assert (marked / "ran").exists()


def outside_file(project):
    outside = project.parent / f"{project.name}_outside"
    outside.mkdir(exist_ok=True)
    (outside / "p.py").write_text(MARKS_ITS_RUN)
    return outside / "p.py"


OUTSIDE = ("found {entry!r}, which is {path}, outside the config's directory {base}: expected a .py file inside "
           "the config's directory tree (import a plugin kept elsewhere with --plugins or in your own program)")
# (plugins entry, how the test makes it, the message at $.plugins[0])
ENTRIES = [
    ("this", None, "found 'this': expected a .py file path relative to the config's directory (a config imports no "
                   "module by name; import a module with --plugins or in your own program)"),
    ("my_steps", None, "found 'my_steps': expected a .py file path relative to the config's directory (a config "
                       "imports no module by name; import a module with --plugins or in your own program)"),
    ("<outside>", "absolute", OUTSIDE),
    ("../<outside>", "relative", OUTSIDE),
    ("inner.py", "symlink", OUTSIDE),
    ("nofile.py", None, "plugin file 'nofile.py' does not exist (no file {base}/nofile.py); expected a .py file "
                        "relative to the config's directory"),
]


@pytest.mark.parametrize("trust", [False, True], ids=["untrusted", "trusted"])
@pytest.mark.parametrize("entry, kind, message", ENTRIES, ids=[e[1] or e[0] for e in ENTRIES])
def test_a_plugin_entry_is_a_py_file_inside_the_configs_folder(marked, registry_scope, trust, entry, kind, message):
    target = outside_file(marked)
    entry = {"absolute": str(target), "relative": f"../{target.parent.name}/p.py", "symlink": "inner.py"}.get(kind,
                                                                                                              entry)
    if kind == "symlink":
        (marked / "inner.py").symlink_to(target)
    path = config(marked, plugins=["my_steps.py", entry] if kind else [entry], steps=SCALED)
    loads = [lambda: load_config(path, trust_plugins=trust)] + ([lambda: build_input_fn(path)] if trust else [])
    for load in loads:
        with pytest.raises(ConfigError) as caught:
            load()
        base = os.path.realpath(marked)
        assert [(p.path, p.message) for p in caught.value.problems] == [
            (f"$.plugins[{1 if kind else 0}]", message.format(entry=entry, path=os.path.realpath(target), base=base))]
    assert "this" not in sys.modules or kind  # `import this` prints the Zen of Python: a module, not a file
    assert not (marked / "ran").exists() and not (target.parent / "ran").exists()


def test_threads_loading_the_same_plugin_file_import_it_once_and_all_get_its_types(project, registry_scope):
    """8 threads start together; the plugin's import takes a while (a vocabulary read, say), so all of them
    ask for it while it runs. Each must get the working step, and the one registration of it."""
    (project / "slow.py").write_text("import time\ntime.sleep(0.5)\n" + PLUGIN.format(prefix=""))
    path = config(project, plugins=["slow.py"], steps=SCALED)
    start, results = threading.Barrier(8), [None] * 8

    def build(i):
        start.wait()
        try:
            (batch,) = build_input_fn(path)().take(1).as_numpy_iterator()
            results[i] = (batch[0]["frames"], [int(n) for n in batch[1]["label"]], STEPS.get("scale"))
        except BaseException as error:  # noqa: BLE001  (the assertion below shows it)
            results[i] = error

    threads = [threading.Thread(target=build, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert [type(r).__name__ for r in results] == ["tuple"] * 8, results
    (registered,) = {id(r[2]) for r in results}
    assert registered == id(STEPS.get("scale")) and STEPS.names().count("scale") == 1
    for frames, labels, _ in results:
        assert sorted(labels) == list(range(6))
        np.testing.assert_array_equal(frames, padded([2 * frames_of(n) for n in labels]))
