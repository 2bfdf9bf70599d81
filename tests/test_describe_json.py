"""``describe``'s output signature and ``describe --json`` against what the compiled dataset really is.

The signature describe computes from the checked config (no TensorFlow) must equal the
``element_spec`` of ``build_input_fn(config)()`` for every example config and for variants that
change the batch axis (a finite last batch, segmenting's small batches); ``--json`` must print
one JSON object whose signature, files and records are those of the dataset and its manifest.
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import batchloaders
from batchloaders import build_input_fn, load_config
from batchloaders.cli.describe import plan, signature, steps_per_epoch, total_batches
import warm
from conftest import example, feature, write_manifest, write_records

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = sorted(glob.glob(str(REPO / "configs" / "*.yaml")))
BUILTIN_ONLY = [p for p in CONFIGS if "plugin" not in os.path.basename(p)]


@pytest.fixture(scope="module")
def demo_data():
    from batchloaders.demo_data import generate

    generate()


def spec_rows(element_spec) -> dict:
    """element_spec -> {name: (role, dtype, shape with None, kind)}; role "input" or "target"."""
    import tensorflow as tf

    features, targets = element_spec if isinstance(element_spec, tuple) else (element_spec, {})
    kinds = {tf.TensorSpec: "dense", tf.RaggedTensorSpec: "ragged", tf.SparseTensorSpec: "sparse"}
    rows = {}
    for role, part in (("input", features), ("target", targets)):
        for name, spec in part.items():
            if isinstance(spec, tf.RaggedTensorSpec):
                assert spec.ragged_rank == 1, (name, spec)
            rows[name] = (role, spec.dtype.name, spec.shape.as_list(), kinds[type(spec)])
    return rows


def described_rows(outputs) -> dict:
    """describe's signature (Output objects or their JSON) in spec_rows' form."""
    rows = {}
    for o in outputs:
        o = o if isinstance(o, dict) else o.as_json()
        rows[o["name"]] = (o["role"].split()[0], o["dtype"], o["shape"], o["kind"])
    return rows


def variants(config):
    """The config as written, then with the batch axis unknown: a finite epoch that keeps its last, short
    batch, or segmenting that leaves out the lanes with no work (allow_small_batch)."""
    yield "as written", config
    if config.segmenting is not None:
        yield "small batches", dataclasses.replace(
            config, regroup=dataclasses.replace(config.segmenting, allow_small_batch=True))
    else:
        yield "epochs 1, drop_remainder false", dataclasses.replace(config, epochs=1, drop_remainder=False)


def local(path: str):
    """The config, run in this process: a service block's pipeline is the one its workers run, and its
    batches have the same element_spec (tests/test_service.py)."""
    return dataclasses.replace(load_config(path), service=None)


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_signature_equals_the_element_spec(demo_data, path):
    for what, config in variants(local(path)):
        want = spec_rows(build_input_fn(config)().element_spec)
        assert described_rows(signature(config)) == want, what


def test_the_variants_do_change_the_batch_axis(demo_data):
    """Otherwise the variants above would prove nothing more than the configs as written."""
    for path in CONFIGS:
        written, other = (c for _, c in variants(load_config(path)))
        assert signature(written)[0].shape[0] == written.target_batch_size or written.bucketing is not None
        assert signature(other)[0].shape[0] is None, path


@pytest.fixture(scope="module")
def json_plans(demo_data):
    """describe --json of every example config, run as a user runs it (trusting the plugins of our own configs)."""
    out = {}
    for path in CONFIGS:
        result = warm.shared().run(warm.CLI, argv=["describe", "--json", "--trust-plugins", os.path.relpath(path, REPO)],
                                   cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300)
        assert result.returncode == 0, result.stderr
        out[path] = json.loads(result.stdout)  # the whole of stdout is one JSON object
    return out


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_json_signature_files_and_records(json_plans, path):
    got, config = json_plans[path], local(path)
    assert described_rows(got["signature"]) == spec_rows(build_input_fn(config)().element_spec)
    assert [o["name"] for o in got["signature"]] == [o.name for o in signature(config)]
    assert got["files"] == {"count": len(config.dataset.files), "paths": list(config.dataset.files)}
    manifest = config.dataset.manifest
    per_file = [manifest.entry(f).num_records if manifest.entry(f) else None for f in config.dataset.files]
    assert got["records"]["per_file"] == per_file
    assert got["records"]["total"] == (None if None in per_file else sum(per_file))
    assert got["steps_per_epoch"] == steps_per_epoch(config)
    assert got["loader"] == config.type and got["batch"]["target_batch_size"] == config.target_batch_size


def test_json_counts_of_the_example_datasets(json_plans):
    """By hand: chars has 24,000 records in 4 files, 375 batches of 64; stream's manifest lists no counts."""
    chars = json_plans[str(REPO / "configs" / "chars_independent.yaml")]
    assert chars["records"]["total"] == 24000 and chars["records"]["listed"] == 4
    assert chars["steps_per_epoch"] == 24000 // 64 == 375
    assert chars["batches"] is None and chars["repeats_forever"] is True
    stream = json_plans[str(REPO / "configs" / "stream_continuous.yaml")]
    assert stream["records"] == {"total": None, "per_file": [None] * 4, "listed": 0}
    assert stream["steps_per_epoch"] is None
    assert all(plan["steps_per_epoch"] is None for path, plan in json_plans.items() if "chars" not in path)
    segmented = json_plans[str(REPO / "configs" / "sentences_segmented.yaml")]
    assert segmented["segmenting"]["counters"]["is_first"] == {"name": "is_first", "dtype": "bool", "shape": []}
    roles = {o["name"]: o["role"] for o in segmented["signature"]}
    assert roles["slot"] == "input (counter)" and roles["chars"] == "input" and roles["next_chars"] == "target"


def test_describe_does_not_import_tensorflow_for_builtin_types(demo_data):
    code = textwrap.dedent(f"""
        import io, sys
        from batchloaders.cli import describe
        for path in {BUILTIN_ONLY!r}:
            describe.run(path, io.StringIO())
            describe.run(path, io.StringIO(), as_json=True)
            assert "tensorflow" not in sys.modules, path + ": describe imported tensorflow"
            assert "apache_beam" not in sys.modules, path + ": describe imported Apache Beam"
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


@pytest.fixture(scope="module")
def eight_records(tmp_path_factory):
    """8 Examples in 2 files (3 and 5 records), the manifest listing both (read only: made once)."""
    data = tmp_path_factory.mktemp("eight") / "data"
    write_manifest(data, [feature("x", "int64", [], "int")])
    write_records(data / "a.tfrecords", [example(x=("int", [i])) for i in range(3)])
    write_records(data / "b.tfrecords", [example(x=("int", [i])) for i in range(3, 8)])
    batchloaders.write_manifest(str(data))
    return data


def independent(data, **args) -> dict:
    body = {"dataset": {"type": "dir", "args": {"data_dir": str(data)}}, "target_batch_size": 3,
            "num_read_buffer_bytes": 0, "num_prefetch": 1, "primary_features": [{"from_name": "x", "to_name": "x"}],
            **args}
    return {"type": "independent", "model": {"inputs": ["x"]}, "args": body}


@pytest.mark.parametrize("epochs, drop, steps, batches", [
    (1, False, 3, 3),  # 3 + 3 + 2
    (1, True, 2, 2),
    (2, False, 3, 6),  # 16 records run on across the passes: 6 batches, not 2 x 3
    (2, True, 2, 5),
    (None, False, 2, None),  # forever: whole batches per pass, every batch full
])
def test_steps_per_epoch_and_batches(eight_records, epochs, drop, steps, batches):
    config = load_config(independent(eight_records, epochs=epochs, drop_remainder=drop))
    assert (steps_per_epoch(config), total_batches(config)) == (steps, batches)
    assert plan(config)["records"] == {"total": 8, "per_file": [3, 5], "listed": 2}
    if batches is not None:
        dataset = build_input_fn(config)()
        assert int(dataset.cardinality()) == batches
        assert sum(1 for _ in dataset) == batches


def test_unknown_steps_say_why(eight_records):
    from batchloaders.cli.describe import describe

    listed = load_config(independent(eight_records, epochs=1, drop_remainder=False))
    assert ("records: 8 in 2 files (from the manifest's files; per file: 3, 5); 3 batches in 1 epoch(s), the "
            "dataset's cardinality") in describe(listed)
    assert "steps per epoch: 3 (one pass over 8 records in batches of 3; the dataset holds 3 batches in 1 epoch(s))" \
        in describe(listed)
    skipping = load_config(independent(eight_records, epochs=1, drop_remainder=False, on_corrupt="skip_file"))
    assert "steps per epoch: unknown (on_corrupt skip_file may read fewer records)" in describe(skipping)
    assert plan(skipping)["steps_per_epoch"] is None


def test_json_prints_nothing_else_and_errors_go_to_stderr(tmp_path):
    (tmp_path / "bad.yaml").write_text("type: independent\nargs: {}\n")
    result = subprocess.run([sys.executable, "-m", "batchloaders", "describe", "--json", "bad.yaml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("batchloaders describe: error: bad.yaml: ")


def test_readme_shows_what_describe_prints(demo_data):
    from batchloaders.cli.describe import describe
    from test_readme_plugins import section_blocks

    (shown,) = [code for lang, code in section_blocks("## Command line") if lang == "text" and "signature" in code]
    printed = describe(load_config(str(REPO / "configs" / "chars_independent.yaml")))
    for line in shown.splitlines():
        assert line == "..." or line in printed, line


def test_independent_segmenting_has_no_step_count(tmp_path):
    """The manifest fixes the records, not the segment batches: 8 sequences of 1..8 steps in 2 lanes of 3 steps
    give 8 batches, not the 4 that 8 records in batches of 2 would. (And a config without targets: features only.)"""
    from conftest import sequence_example

    from batchloaders.cli.describe import describe

    data = tmp_path / "data"
    write_manifest(data, [feature("tokens", "int64", [], "int", var_len=True)], allow_var_len=True)
    write_records(data / "a.tfrecords", [sequence_example({}, {"tokens": ("int", [[j] for j in range(n)])})
                                         for n in range(1, 9)])
    batchloaders.write_manifest(str(data))
    config = load_config({"type": "independent", "model": {"inputs": ["tokens"]}, "args": {
        "dataset": {"type": "dir", "args": {"data_dir": str(data)}}, "target_batch_size": 2, "epochs": 1,
        "drop_remainder": False, "num_prefetch": 1, "num_read_buffer_bytes": 0,
        "primary_features": [{"from_name": "tokens", "to_name": "tokens"}], "segmenting": {"num_unroll": 3}}})
    dataset = build_input_fn(config)()
    assert sum(1 for _ in dataset) == 8
    assert (steps_per_epoch(config), total_batches(config)) == (None, None)
    assert "steps per epoch: unknown (segmenting: segment batches are counted only once made)" in describe(config)
    assert described_rows(signature(config)) == spec_rows(dataset.element_spec)


def test_a_registered_batcher_is_shown_as_unknown_until_it_runs(eight_records, doubled_batcher):
    from batchloaders.cli.describe import describe

    config = load_config(independent(eight_records, epochs=1, drop_remainder=False,
                                      padding=[{"tensor": "x", "batching": doubled_batcher}]))
    (out,) = signature(config)
    assert (out.dtype, out.shape, out.kind) == (None, None, "batcher doubled")
    assert [line.split() for line in describe(config)[-2:]] == [["name", "role", "dtype", "shape", "kind"],
                                                               ["x", "input", "?", "?", "batcher", "doubled"]]
    assert plan(config)["signature"] == [{"name": "x", "role": "input", "dtype": None, "shape": None,
                                          "kind": "batcher doubled"}]
