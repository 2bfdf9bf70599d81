"""Steps and secondary features users write: registered by name with a schema, named in configs, checked like
the built-ins, refused with a located error when they break the contract (Python results or callbacks,
bad schemas, taken names, modules that do not import).

Data: 2 files x 3 SequenceExamples; step j of record r of file f holds frames = [v, -v] with
v = 100*(3f + r) + j, and record (f, r) has 2 + (3f + r) % 3 steps; label = 3f + r.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import yaml

from batchloaders import ConfigError, build_input_fn, load_config
from batchloaders.transform.builtin_types import load as load_builtin_types
from batchloaders.transform.registry import ALWAYS, SECONDARY, STEPS
from conftest import collect, feature, sequence_example, write_manifest, write_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PLUGIN = '''
import tensorflow as tf
import batchloaders

@batchloaders.register_step("{prefix}scale", schema={{
    "type": "object", "required": ["factor"], "additionalProperties": False,
    "properties": {{"factor": {{"type": "number", "exclusiveMinimum": 0}}}}}})
def scale(x, factor):
    return x * factor

@batchloaders.register_step("{prefix}drop_first")
def drop_first(x):
    return x[1:]

@batchloaders.register_secondary("{prefix}energy", schema={{
    "type": "object", "required": ["tensor"], "properties": {{"tensor": {{"type": "string"}}}}}})
def energy(features, tensor):
    """Mean square over the example's own steps: padding would change the count."""
    x = features[tensor]
    return tf.reduce_sum(tf.square(x)) / tf.cast(tf.shape(x)[0], tf.float32)
'''


@pytest.fixture
def registry_scope():
    """Registrations and imported plugin modules of one test are forgotten after it."""
    load_builtin_types()  # before the snapshot: the built-ins stay registered
    steps, secondary, modules = STEPS.snapshot(), SECONDARY.snapshot(), set(sys.modules)
    yield
    STEPS.restore(steps)
    SECONDARY.restore(secondary)
    for name in set(sys.modules) - modules:
        del sys.modules[name]


@pytest.fixture
def project(tmp_path):
    """A dataset, a plugin module file and a helper writing YAML configs next to it."""
    data = tmp_path / "data"
    write_manifest(data, [feature("frames", "float32", [2], "float", var_len=True),
                          feature("label", "int64", [], "int", var_len=False)], allow_var_len=True)
    for f in range(2):
        records = []
        for r in range(3):
            n = 3 * f + r
            v = 100 * n + np.arange(2 + n % 3)
            records.append(sequence_example({"label": ("int", [n])},
                                            {"frames": ("float", [[float(a), float(-a)] for a in v])}))
        write_records(data / f"part-{f}.tfrecords", records)
    (tmp_path / "my_steps.py").write_text(PLUGIN.format(prefix=""))
    return tmp_path


def frames_of(n: int) -> np.ndarray:
    v = 100 * n + np.arange(2 + n % 3)
    return np.stack([v, -v], 1).astype(np.float32)


def config(project, *, steps=(), secondary=(), plugins=("my_steps.py",), inputs=("frames",), name="c.yaml",
           targets=("label",), **args):
    doc = {"type": "independent", "model": {"inputs": list(inputs), "targets": list(targets)},
           "args": {"dataset": {"type": "dir", "args": {"data_dir": "data"}}, "target_batch_size": 6,
                    "drop_remainder": False, "epochs": 1, "num_read_buffer_bytes": 0, "num_prefetch": 0, "padding": True,
                    "primary_features": [{"from_name": "frames", "to_name": "frames"},
                                         {"from_name": "label", "to_name": "label"}],
                    "secondary_features": list(secondary), "processing_steps": list(steps), **args}}
    if plugins is not None:
        doc["plugins"] = list(plugins)
    path = project / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def one_batch(path):
    (batch,) = collect(build_input_fn(path)())
    features, targets = batch
    return features, [int(n) for n in targets["label"]]


def padded(rows, width=None):
    width = width or max(len(r) for r in rows)
    out = np.zeros((len(rows), width) + rows[0].shape[1:], rows[0].dtype)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


# ---------------------------------------------------------------- plugins that work

def test_per_example_step_and_secondary_from_a_plugin_file(project, registry_scope):
    path = config(project, inputs=("frames", "energy"),
                  secondary=[{"to_name": "energy", "type": "energy", "args": {"tensor": "frames"}}],
                  steps=[{"tensor": "frames", "type": "scale", "args": {"factor": 0.5}},
                         {"tensor": "frames", "type": "drop_first"}])
    features, labels = one_batch(path)
    assert sorted(labels) == list(range(6))
    # drop_first shortens every example by one: the batch is as long as the longest remainder.
    np.testing.assert_array_equal(features["frames"], padded([0.5 * frames_of(n)[1:] for n in labels]))
    # energy is built before the steps (secondary features come first): all frames, unscaled, and
    # only the example's own (the mean would be smaller if the batch's padding were counted).
    np.testing.assert_allclose(features["energy"], [np.square(frames_of(n)).sum() / len(frames_of(n))
                                                    for n in labels], rtol=1e-6)


def test_python_control_flow_on_tensors_runs_as_it_was_checked(project, registry_scope):
    """A plugin is traced through AutoGraph when checked (as tf.function traces), so the pipeline runs it
    that way too: a Python ``if`` and ``for`` on tensors work, per example and batched."""
    (project / "flow.py").write_text(textwrap.dedent('''
        import tensorflow as tf
        import batchloaders

        @batchloaders.register_step("negate_from", schema={"type": "object", "required": ["first"],
                                                           "properties": {"first": {"type": "number"}}})
        def negate_from(x, first):
            if x[0, 0] >= first:  # a tensor: AutoGraph makes this a tf.cond
                return -x
            return x

        @batchloaders.register_step("add_step_count", batched=True)
        def add_step_count(args, values, lengths, info_in, info_out):
            out = values
            for _ in tf.range(tf.shape(values)[1]):  # a tensor loop: a tf.while_loop
                out += 1.0
            return out, lengths
        '''))
    path = config(project, plugins=["flow.py"], steps=[{"tensor": "frames", "type": "negate_from",
                                                        "args": {"first": 300}},
                                                       {"tensor": "frames", "type": "add_step_count"}])
    load_config(path)  # checked: traced on a TensorSpec of its input
    features, labels = one_batch(path)
    width = max(len(frames_of(n)) for n in labels)
    # the loop ran once per step of the padded batch; the padding stays the pad value
    expected = padded([(-frames_of(n) if 100 * n >= 300 else frames_of(n)) + width for n in labels])
    np.testing.assert_array_equal(features["frames"], expected)


@pytest.mark.parametrize("block", [{"bucketing": {"by": "frames", "boundaries": [3], "batch_sizes": [2, 2]}},
                                   {"packing": {"length": 200, "tensors": ["frames"]},
                                    "primary_features": [{"from_name": "frames", "to_name": "frames"}]}])
def test_a_step_whose_lengths_run_past_its_values_stops_regrouping_with_a_located_error(project, registry_scope,
                                                                                        block):
    """Bucketing and packing cut each example's steps by its length: a step that claims more steps than it
    gave is named (its tensor, the block, the lengths), not left to fail deep in TensorFlow."""
    (project / "overlong.py").write_text(textwrap.dedent('''
        import batchloaders

        @batchloaders.register_step("overlong", batched=True)
        def overlong(args, values, lengths, info_in, info_out):
            return values, lengths + 100
        '''))
    inputs = ("frames", "segment_ids") if "packing" in block else ("frames",)
    path = config(project, plugins=["overlong.py"], steps=[{"tensor": "frames", "type": "overlong"}], inputs=inputs,
                  targets=() if "packing" in block else ("label",), **block)
    where = next(iter(block))
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"c\.yaml: \$\.args\.{where}: tensor \W*frames\W* has an "
                                                             r"example of 104 steps whose values hold 4"):
        collect(build_input_fn(path)())


def test_control_flow_in_a_partial_and_a_callable_object_runs_too(project, registry_scope):
    """AutoGraph converts plain functions only: a partial and a callable object are converted through the
    function they call (a partial without a name is named by its function)."""
    (project / "callables.py").write_text(textwrap.dedent('''
        import functools
        import batchloaders

        def negate_from(x, first):
            if x[0, 0] >= first:
                return -x
            return x

        class Doubled:
            def __call__(self, x):
                if x[0, 0] < 0:  # after negate_from: the negated examples are doubled
                    return 2 * x
                return x

        batchloaders.register_step("negate_part")(functools.partial(negate_from, first=300))
        batchloaders.register_step("doubled")(Doubled())
        '''))
    path = config(project, plugins=["callables.py"], steps=[{"tensor": "frames", "type": "negate_part"},
                                                             {"tensor": "frames", "type": "doubled"}])
    features, labels = one_batch(path)
    expected = padded([(-2 * frames_of(n) if 100 * n >= 300 else frames_of(n)) for n in labels])
    np.testing.assert_array_equal(features["frames"], expected)


def test_batched_plugin_step_with_infer(project, registry_scope):
    (project / "batched.py").write_text(textwrap.dedent('''
        import tensorflow as tf
        import batchloaders
        from batchloaders.core.model import TensorInfo

        def infer(args, info, ctx):
            return TensorInfo(info.dtype, info.shape[:1] + (1,))

        @batchloaders.register_step("first_column", infer=infer, batched=True)
        def first_column(args, values, lengths, info, info_out):
            return values[..., :1] + tf.cast(tf.reshape(lengths, [-1, 1, 1]), values.dtype), lengths
        '''))
    path = config(project, plugins=["batched.py"], steps=[{"tensor": "frames", "type": "first_column"}])
    assert load_config(path).tensors["frames"].shape == (None, 1)
    features, labels = one_batch(path)
    np.testing.assert_array_equal(features["frames"], padded([frames_of(n)[:, :1] + len(frames_of(n))
                                                              for n in labels]))


def test_batched_plugin_without_infer_is_traced(project, registry_scope):
    (project / "traced.py").write_text(textwrap.dedent('''
        import batchloaders

        @batchloaders.register_step("double_all", batched=True)
        def double_all(args, values, lengths, info_in, info_out):
            return values * 2, lengths

        @batchloaders.register_step("first_step", batched=True)
        def first_step(args, values, lengths, info_in, info_out):
            return values[:, 0], None  # every example has a first step here
        '''))
    path = config(project, plugins=["traced.py"], steps=[{"tensor": "frames", "type": "double_all"}])
    assert load_config(path).tensors["frames"].shape == (None, 2)
    features, labels = one_batch(path)
    np.testing.assert_array_equal(features["frames"], padded([2 * frames_of(n) for n in labels]))
    path = config(project, plugins=["traced.py"], steps=[{"tensor": "frames", "type": "first_step"}], name="d.yaml")
    assert load_config(path).tensors["frames"].shape == (2,)
    features, labels = one_batch(path)
    np.testing.assert_array_equal(features["frames"], [frames_of(n)[0] for n in labels])


def origin(path, function: str) -> str:
    """How messages name a plugin's function: its file (absolute outside the working directory), the
    function, the line registering it."""
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "register_" in t)
    return f"{os.path.realpath(path)}: function {function}, line {line}"


BROKEN_PROMISES = {
    # infer says one thing, the function makes another: refused when the pipeline is built, naming the step
    # and the plugin's file and function ({origin}).
    "dtype": ("@batchloaders.register_step('p', infer=lambda a, i, c: TensorInfo('float32', i.shape), batched=True)\n"
              "def p(args, values, lengths, i, o):\n    return tf.cast(values, tf.int32), lengths\n",
              "step 'p' ({origin}) made a batch int32 [?, ?, 2]: expected float32 [?, ?, 2]"),
    "numpy": ("@batchloaders.register_step('p', infer=lambda a, i, c: i, batched=True)\n"
              "def p(args, values, lengths, i, o):\n    return np.zeros(3), lengths\n",
              "step 'p' ({origin}) returned ndarray"),
    "lengths": ("@batchloaders.register_step('p', infer=lambda a, i, c: i, batched=True)\n"
                "def p(args, values, lengths, i, o):\n    return values, None\n", "without its lengths"),
    "pair": ("@batchloaders.register_step('p', infer=lambda a, i, c: i, batched=True)\n"
             "def p(args, values, lengths, i, o):\n    return values, lengths, None\n",
             "step 'p' ({origin}) (batched) returned a tuple of 3: expected a pair (values, lengths or None)"),
    "per_example_shape": ("@batchloaders.register_step('p', infer=lambda a, i, c: TensorInfo('float32', (5,)))\n"
                          "def p(x):\n    return x[0]\n", "returned float32 [2] for one example: expected float32 [5]"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_PROMISES))
def test_a_function_that_breaks_its_infer_promise_is_refused_when_built(project, registry_scope, case):
    body, message = BROKEN_PROMISES[case]
    (project / "promise.py").write_text("import numpy as np\nimport tensorflow as tf\nimport batchloaders\n"
                                        "from batchloaders.core.model import TensorInfo\n" + body)
    path = config(project, plugins=["promise.py"], steps=[{"tensor": "frames", "type": "p"}])
    load_config(path)
    with pytest.raises(ConfigError) as caught:
        build_input_fn(path)()
    (problem,) = caught.value.problems
    message = message.format(origin=origin(project / "promise.py", "p"))
    assert problem.path == "$.args.processing_steps[0]" and message in problem.message, problem.message


def test_a_refused_per_example_function_leaves_distribution_strategies_working(project, registry_scope):
    # tf.map_fn marks the shared variable scope while it traces and unmarks it only on success: a step
    # refused mid-trace used to make every later strategy scope in the process fail.
    body, _ = BROKEN_PROMISES["per_example_shape"]
    (project / "promise.py").write_text("import tensorflow as tf\nimport batchloaders\n"
                                        "from batchloaders.core.model import TensorInfo\n" + body)
    path = config(project, plugins=["promise.py"], steps=[{"tensor": "frames", "type": "p"}])
    with pytest.raises(ConfigError):
        build_input_fn(path)()
    assert tf.compat.v1.get_variable_scope().caching_device is None
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        weight = tf.Variable([[2.0], [3.0]])
    total = strategy.run(tf.function(lambda: tf.matmul([[1.0, 10.0]], weight)))
    assert strategy.experimental_local_results(total)[0].numpy().tolist() == [[32.0]]


def test_a_per_example_size_the_trace_cannot_see_is_checked_while_running(project, registry_scope):
    (project / "late.py").write_text(textwrap.dedent('''
        import batchloaders
        from batchloaders.core.model import TensorInfo

        @batchloaders.register_step("first3", infer=lambda a, i, c: TensorInfo(i.dtype, (3, 2)))
        def first3(x):
            return x[:3]  # examples have 2 to 4 steps: the ones with 2 break the promise
        '''))
    import tensorflow as tf

    path = config(project, plugins=["late.py"], steps=[{"tensor": "frames", "type": "first3"}])
    # (TensorFlow's message quotes the step's name with escaped quotes.)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"first3.{1,3} \(.*late.py: function first3, line 5\) "
                                                             r"returned an example whose axis 0 is not 3 long \(its "
                                                             r"infer function says \[3, 2\]\)"):
        collect(build_input_fn(path)())


def test_a_configs_plugins_are_seen_by_that_config_only(project, registry_scope):
    """Validating a.yaml (which names the plugin) before b.yaml (which does not) must not make b.yaml valid."""
    a = config(project, steps=[{"tensor": "frames", "type": "scale", "args": {"factor": 2}}], name="a.yaml")
    b = config(project, plugins=None, steps=[{"tensor": "frames", "type": "scale", "args": {"factor": 2}}],
               name="b.yaml")
    load_config(a)
    with pytest.raises(ConfigError, match=r"b.yaml: \$\.args\.processing_steps\[0\]\.type: unknown processing step "
                                          r"type 'scale'"):
        load_config(b)
    # The same file by two paths is one import: no "registered twice".
    both = config(project, plugins=["./my_steps.py", "my_steps.py"], steps=[{"tensor": "frames", "type": "scale",
                                                                        "args": {"factor": 2}}], name="both.yaml")
    assert load_config(both).processing_steps[0].type == "scale"


def test_same_module_name_in_two_folders_gives_each_config_its_own(tmp_path, registry_scope):
    made = []
    for name, factor in (("one", 2), ("two", 3)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "data").symlink_to(project_data(tmp_path), target_is_directory=True)
        (folder / "local_steps.py").write_text(
            f"import batchloaders\n@batchloaders.register_step('times{factor}')\n"
            f"def f(x):\n    return x * {factor}\n")
        made.append((config(folder, plugins=["local_steps.py"], steps=[{"tensor": "frames", "type": f"times{factor}"}]),
                     factor))
    for path, factor in made:
        features, labels = one_batch(path)
        np.testing.assert_array_equal(features["frames"], padded([factor * frames_of(n) for n in labels]))


def project_data(tmp_path):
    data = tmp_path / "shared_data"
    if not data.exists():
        write_manifest(data, [feature("frames", "float32", [2], "float", var_len=True),
                              feature("label", "int64", [], "int", var_len=False)], allow_var_len=True)
        for f in range(2):
            records = [sequence_example({"label": ("int", [3 * f + r])},
                                        {"frames": ("float", [[float(a), float(-a)] for a in
                                                              100 * (3 * f + r) + np.arange(2 + (3 * f + r) % 3)])})
                       for r in range(3)]
            write_records(data / f"part-{f}.tfrecords", records)
    return data


def test_traced_output_shape_is_what_the_checker_knows(project, registry_scope):
    path = config(project, steps=[{"tensor": "frames", "type": "drop_first"}])
    info = load_config(path).tensors["frames"]
    assert (info.dtype, info.shape) == ("float32", (None, 2))


# ---------------------------------------------------------------- located errors

@pytest.mark.parametrize("step, where, message", [
    ({"tensor": "frames", "type": "scale", "args": {"factor": -1}}, "$.args.processing_steps[0].args.factor",
     "expected a number > 0, found -1"),
    ({"tensor": "frames", "type": "scale"}, "$.args.processing_steps[0]", "missing required key 'args'"),
    ({"tensor": "frames", "type": "scael", "args": {"factor": 1}}, "$.args.processing_steps[0].type",
     r"unknown processing step type 'scael' \(did you mean 'scale'\?\); expected one of: .*scale.*slice"),
])
def test_plugin_args_are_checked_against_the_registered_schema(project, registry_scope, step, where, message):
    with pytest.raises(ConfigError) as caught:
        load_config(config(project, steps=[step]))
    (problem,) = caught.value.problems
    assert problem.path.startswith(where) and problem.file.endswith("c.yaml") and problem.line
    assert __import__("re").search(message, problem.message), problem.message


BAD_PLUGINS = [
    ("missing_module", None, r"found 'missing_module': expected a \.py file path relative to the config's directory"),
    ("broken.py", "import tensorflow\nraise RuntimeError('no GPU here')\n",
     r"plugin 'broken.py' failed to import: RuntimeError: no GPU here \(.*broken.py, line 2\)"),
    ("nofile.py", None, "plugin file 'nofile.py' does not exist"),
    ("taken.py", "import batchloaders\n@batchloaders.register_step('slice')\ndef f(x):\n    return x\n",
     r"processing step type 'slice' is registered twice: first by batchloaders.transform.steps.slice"),
    ("badschema.py", "import batchloaders\n@batchloaders.register_step('s2', schema={'type': 'objekt'})\n"
                     "def f(x):\n    return x\n", "the schema is not a valid JSON Schema"),
    ("notobject.py", "import batchloaders\n@batchloaders.register_step('s3', schema={'type': 'array'})\n"
                     "def f(x):\n    return x\n", "expected \"type\": \"object\""),
    ("badname.py", "import batchloaders\n@batchloaders.register_step('has space')\ndef f(x):\n    return x\n",
     "found the name 'has space'"),
]


@pytest.mark.parametrize("entry, source, message", BAD_PLUGINS, ids=[b[0] for b in BAD_PLUGINS])
def test_a_plugin_that_cannot_be_loaded_is_a_config_error_naming_it(project, registry_scope, entry, source, message):
    if source is not None:
        (project / entry).write_text(source)
    path = config(project, plugins=["my_steps.py", entry])
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    (problem,) = caught.value.problems
    assert problem.path == "$.plugins[1]" and problem.line
    assert __import__("re").search(message, problem.message), problem.message


CONTRACT_BREAKERS = {  # the message after "step 'NAME' (breaks.py: function f, line N) "
    "numpy_result": ("import numpy as np\n@batchloaders.register_step('np_step')\ndef f(x):\n"
                     "    return np.zeros(3)\n", "returned ndarray array([0., 0., 0.]): expected a tf.Tensor made of "
                                                 "TensorFlow ops (no Python or NumPy values)"),
    "dict_result": ("@batchloaders.register_step('dict_step')\ndef f(x):\n    return {'a': x}\n",
                    "returned dict {'a': <tf.Tensor 'x:0' shape=(None, 2) dtype=float32>}: expected a tf.Tensor made "
                    "of TensorFlow ops (no Python or NumPy values)"),
    "py_function": ("import tensorflow as tf\n@batchloaders.register_step('py_step')\ndef f(x):\n"
                    "    return tf.py_function(lambda t: t, [x], tf.float32)\n",
                    "calls back into Python (EagerPyFunc, from tf.py_function or tf.numpy_function): expected "
                    "TensorFlow ops only, so that the pipeline runs without the Python interpreter"),
    "numpy_function": ("import tensorflow as tf\n@batchloaders.register_step('np_fn')\ndef f(x):\n"
                       "    return tf.ensure_shape(tf.numpy_function(lambda t: t, [x], tf.float32), [None, 2])\n",
                       "calls back into Python (PyFunc, from tf.py_function or tf.numpy_function): expected "
                       "TensorFlow ops only, so that the pipeline runs without the Python interpreter"),
    "raises": ("@batchloaders.register_step('bad_rank')\ndef f(x):\n    return x[:, :, 0]\n",
               "failed when traced on its input: ValueError: Index out of range using input dim 2; input has only 2 "
               "dims for '{{node strided_slice}}"),
}


@pytest.mark.parametrize("form", ["yaml", "dict"])
@pytest.mark.parametrize("case", sorted(CONTRACT_BREAKERS))
def test_steps_that_are_not_tensorflow_ops_are_refused_when_checked(project, registry_scope, monkeypatch, case, form):
    """The message names the config item, and the plugin's file and function (not this package's tracing code):
    relative to the working directory when the plugin is inside it, as a program passing a dict has it."""
    body, message = CONTRACT_BREAKERS[case]
    (project / "breaks.py").write_text("import batchloaders\n" + body)
    name = body.split("register_step('")[1].split("'")[0]
    path = config(project, plugins=["breaks.py"], steps=[{"tensor": "frames", "type": name}])
    line = body.splitlines().index(f"@batchloaders.register_step('{name}')") + 2
    where, source = f"{os.path.realpath(project / 'breaks.py')}: function f, line {line}", path
    if form == "dict":  # a dict's plugins are relative to the working directory
        monkeypatch.chdir(project)
        path, where, source = yaml.safe_load(open(path)), f"breaks.py: function f, line {line}", "<dict>"
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    (problem,) = caught.value.problems
    assert (problem.file, problem.path) == (source, "$.args.processing_steps[0].type")
    assert problem.message.startswith(f"step {name!r} ({where}) {message}"), problem.message


def test_a_python_callback_hidden_behind_infer_is_refused_when_the_pipeline_is_built(project, registry_scope):
    """With an infer function nothing is traced at check time: the build-time check still refuses it."""
    (project / "hidden.py").write_text(textwrap.dedent('''
        import tensorflow as tf
        import batchloaders

        @batchloaders.register_step("hidden", infer=lambda args, info, ctx: info)
        def hidden(x):
            return tf.py_function(lambda t: t * 2, [x], tf.float32)
        '''))
    path = config(project, plugins=["hidden.py"], steps=[{"tensor": "frames", "type": "hidden"}])
    load_config(path)  # passes: infer says what it returns
    with pytest.raises(ConfigError) as caught:
        build_input_fn(path)()
    (problem,) = caught.value.problems
    assert (problem.file, problem.path) == (path, "$.args.processing_steps[0]")
    assert problem.message.startswith(f"step 'hidden' ({origin(project / 'hidden.py', 'hidden')}) calls back into "
                                      "Python (EagerPyFunc"), problem.message


def test_registering_a_taken_name_in_code_is_refused(registry_scope):
    import batchloaders

    with pytest.raises(batchloaders.PluginError, match=r"register_step\('slice'\): processing step type 'slice' "
                                                       r"is registered twice"):
        @batchloaders.register_step("slice")
        def again(x):
            return x


# ---------------------------------------------------------------- the command line

def run_cli(cwd, *args):
    return subprocess.run([sys.executable, "-m", "batchloaders", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT})


def test_cli_validates_with_plugins_from_the_command_line(project):
    path = config(project, plugins=None, steps=[{"tensor": "frames", "type": "scale", "args": {"factor": 2}}])
    without = run_cli(project, "validate", path)
    assert without.returncode == 1 and "unknown processing step type 'scale'" in without.stdout
    ok = run_cli(project, "validate", "--plugins", "my_steps", path)
    assert (ok.returncode, ok.stdout.strip()) == (0, f"OK {path}")
    assert "tensorflow" not in ok.stderr.lower() or ok.returncode == 0
    missing = run_cli(project, "validate", "--plugins", "my_stepz", path)
    assert missing.returncode == 1
    assert "<command line>: --plugins my_stepz: plugin module 'my_stepz' cannot be imported" in missing.stderr


def test_cli_schema_writes_plugin_types_for_editors(project, tmp_path):
    out = tmp_path / "schemas"
    done = run_cli(project, "schema", "--plugins", "my_steps.py", str(out))
    assert done.returncode == 0, done.stderr
    import json

    step = json.loads((out / "step.schema.json").read_text())
    assert {"scale", "drop_first", "slice"} <= set(step["properties"]["type"]["enum"])
    assert json.loads((out / "step_scale.schema.json").read_text())["properties"]["factor"]["type"] == "number"
    # The folder is complete: an editor resolves every $ref from the loader config schema in it.
    assert (out / "loader_config.schema.json").is_file() and (out / "common_args.schema.json").is_file()


def test_shipped_schemas_are_what_a_fresh_process_generates(tmp_path):
    """Editors read schemas/; the checker generates the type files from the registries. They must not
    drift: `batchloaders schema schemas` regenerates them."""
    done = run_cli(ROOT, "schema", str(tmp_path))
    assert done.returncode == 0, done.stderr
    for name in sorted(os.listdir(tmp_path)):
        with open(os.path.join(ROOT, "schemas", name)) as shipped:
            assert yaml.safe_load(shipped) == yaml.safe_load((tmp_path / name).read_text()), name
    assert sorted(n for n in os.listdir(os.path.join(ROOT, "schemas")) if n.endswith(".schema.json")) == \
        sorted(os.listdir(tmp_path))


def test_plugins_from_the_command_line_reach_every_config_after_a_config_imported_them(project, registry_scope):
    """In one process (a program calling cli.main twice, README's command-line block in its test), a file first
    imported by a config's own list and then named with --plugins: every config sees its types, as when the
    command line imports it first."""
    from batchloaders.transform import plugins

    a = config(project, steps=[{"tensor": "frames", "type": "scale", "args": {"factor": 2}}], name="a.yaml")
    b = config(project, plugins=None, steps=[{"tensor": "frames", "type": "scale", "args": {"factor": 2}}],
               name="b.yaml")
    load_config(a)
    with pytest.raises(ConfigError, match="unknown processing step type 'scale'"):
        load_config(b)
    scopes, failed = plugins.load(["my_steps.py"], base_dir=str(project), scoped=False)
    assert failed == [] and scopes == [os.path.realpath(project / "my_steps.py")]
    assert load_config(b).processing_steps[0].type == "scale"
    assert STEPS.get("scale", ALWAYS) is not None and STEPS.get("drop_first", ALWAYS) is not None
