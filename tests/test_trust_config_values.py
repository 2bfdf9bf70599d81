"""Values a config or manifest may hold, and what the data must match before a run starts.

* NaN and infinities are refused wherever a number is taken, by the document loader, naming the file,
  the JSON path, the line and the column (the keys are read from the schemas, so a new key is covered).
* A mixture draws among the sources still running: any weight the schema accepts finishes, the draws
  bounded by the records (``exhausted: continue``).
* A data file the manifest lists with its count and that is gone is an error naming the manifest, the file
  and the records it held.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from batchloaders import ConfigError, ManifestError, build_input_fn, load_config
from batchloaders.config.manifest import load_manifest
from batchloaders.config.schema import load_schema, schema_names
from batchloaders.config.type_schemas import generated
from batchloaders.errors import json_path
from conftest import example, feature, loader_config, write_manifest, write_records

FINITE = "expected a finite number"


# ---------------------------------------------------------------------------------------------
# Every number a schema takes, as a JSON path into a document.

def _schemas() -> dict[str, dict]:
    return {**{name: load_schema(name) for name in schema_names()}, **generated()}


def _resolve(ref: str, base: str, docs: dict) -> tuple[dict, str]:
    file, _, fragment = ref.partition("#")
    node = docs[file or base]
    for part in filter(None, fragment.split("/")):
        node = node[part]
    return node, file or base


def number_paths(root: str) -> list[tuple]:
    """The JSON path (a tuple; a list's item as 0, a pattern's key as 'k') of every value the schema ``root``
    (and the schemas it refers to) types as a number or an integer, in every branch of every condition."""
    docs, found, seen = _schemas(), set(), set()

    def walk(node, base: str, path: tuple) -> None:
        if not isinstance(node, dict) or (id(node), path) in seen or len(path) > 16:
            return
        seen.add((id(node), path))
        if "$ref" in node:
            walk(*_resolve(node["$ref"], base, docs), path)
        types = node.get("type", [])
        if {"number", "integer"} & set([types] if isinstance(types, str) else types):
            found.add(path)
        for key, sub in node.get("properties", {}).items():
            walk(sub, base, path + (key,))
        for sub in node.get("patternProperties", {}).values():
            walk(sub, base, path + ("k",))
        for key in ("additionalProperties", "items"):
            if isinstance(node.get(key), dict):
                walk(node[key], base, path + (("k",) if key == "additionalProperties" else (0,)))
        for i, sub in enumerate(node.get("prefixItems", [])):
            walk(sub, base, path + (i,))
        for key in ("allOf", "anyOf", "oneOf"):
            for sub in node.get(key, []):
                walk(sub, base, path)
        for key in ("then", "else"):
            walk(node.get(key), base, path)

    walk(docs[root], root, ())
    return sorted(found, key=lambda p: json_path(p))


def nested_yaml(path: tuple, leaf: str) -> tuple[str, int, int]:
    """(a YAML document holding ``leaf`` at ``path`` and nothing else, the line and column of the leaf's key, or
    of the leaf itself when it is a list's item)."""
    lines, indent, at = [], 0, None
    for i, part in enumerate(path):
        last = i == len(path) - 1
        if isinstance(part, str):
            lines.append(" " * indent + json.dumps(part) + (f": {leaf}" if last else ":"))
            at = (len(lines), indent + 1)
        else:
            lines.append(" " * indent + "-")
            if last:
                lines.append(" " * (indent + 2) + leaf)
                at = (len(lines), indent + 3)
        indent += 2
    return "\n".join(lines) + "\n", *at


CONFIG_NUMBERS = number_paths("loader_config.schema.json")
MANIFEST_NUMBERS = number_paths("manifest.schema.json")


def test_the_table_holds_the_keys_the_issue_names():
    """The paths come from the schemas: weights, padding values, step arguments, normalize's moments and the
    service's timeout are among them (so a key added to a schema is in the table without a word)."""
    named = {json_path(p) for p in CONFIG_NUMBERS}
    assert {"$.args.sources[0].weight", "$.args.padding[0].value", "$.args.service.batch_timeout_seconds",
            "$.args.processing_steps[0].args.min", "$.args.processing_steps[0].args.max",
            "$.args.target_batch_size", "$.args.seed"} <= named
    assert any(p.startswith("$.args.processing_steps[0].args.mean") for p in named)
    assert len(CONFIG_NUMBERS) > 50 and {"$.files[0].num_records", "$.features[0].shape[0]"} <= {
        json_path(p) for p in MANIFEST_NUMBERS}


@pytest.mark.parametrize("leaf, what", [(".nan", "NaN (not a number)"), (".inf", "infinity"),
                                        ("-.Inf", "-infinity")])
@pytest.mark.parametrize("path", CONFIG_NUMBERS, ids=json_path)
def test_a_config_refuses_nan_and_infinity_at_every_number(tmp_path, path, leaf, what):
    text, line, column = nested_yaml(path, leaf)
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path / "c.yaml")
    assert [str(p) for p in raised.value.problems] == [
        f"{tmp_path / 'c.yaml'}: {json_path(path)}: found {what}: {FINITE} (line {line}, column {column})"]


@pytest.mark.parametrize("path", MANIFEST_NUMBERS, ids=json_path)
def test_a_manifest_refuses_nan_at_every_number(tmp_path, path):
    text, line, column = nested_yaml(path, ".NaN")
    (tmp_path / "m.yaml").write_text(text)
    with pytest.raises(ManifestError) as raised:
        load_manifest(tmp_path / "m.yaml")
    assert [str(p) for p in raised.value.problems] == [
        f"{tmp_path / 'm.yaml'}: {json_path(path)}: found NaN (not a number): {FINITE} (line {line}, column {column})"]


@pytest.fixture
def ids_dir(tmp_path):
    """One file of 6 records holding id 0..5 and x = [id, id + 0.5]."""
    d = tmp_path / "ids"
    write_manifest(d, [feature("id", "int64", [], "int"), feature("x", "float32", [2], "float")])
    write_records(d / "part-0.tfrecords", [example(id=("int", [i]), x=("float", [i, i + 0.5])) for i in range(6)])
    return d


def _mixture(data_dir, weights) -> dict:
    cfg = loader_config(data_dir, [("id", "id")], inputs=["id"])
    del cfg["args"]["dataset"], cfg["args"]["primary_features"]
    cfg["args"]["sources"] = [{"name": f"s{i}", "dataset": {"type": "dir", "args": {"data_dir": str(data_dir)}},
                               "primary_features": [{"from_name": "id", "to_name": "id"}], "weight": w}
                              for i, w in enumerate(weights)]
    return cfg


def test_a_nan_weight_is_refused_by_validate_with_its_line(tmp_path, ids_dir):
    """The issue's case: `validate` said OK and the run failed inside TensorFlow ("Selector index out of range")."""
    text = yaml.safe_dump(_mixture(ids_dir, [1, 2, 3]), sort_keys=False).replace("weight: 2", "weight: .nan")
    path = tmp_path / "mix.yaml"
    path.write_text(text)
    line = text.splitlines().index("    weight: .nan") + 1
    assert text.splitlines().index("  - name: s1") < line - 1 < text.splitlines().index("  - name: s2")
    result = subprocess.run([sys.executable, "-m", "batchloaders", "validate", str(path)], capture_output=True,
                            text=True, timeout=120, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == (f"{path}: $.args.sources[1].weight: found NaN (not a number): {FINITE} "
                                             f"(line {line}, column 5)")


def test_a_nan_service_timeout_is_refused(tmp_path, ids_dir):
    cfg = loader_config(ids_dir, [("id", "id")], inputs=["id"], epochs=None,
                        service={"address": "localhost:5050", "batch_timeout_seconds": 1.5})
    text = yaml.safe_dump(cfg, sort_keys=False)
    assert "batch_timeout_seconds: 1.5" in text
    (tmp_path / "s.yaml").write_text(text.replace("batch_timeout_seconds: 1.5", "batch_timeout_seconds: .nan"))
    line = text.splitlines().index("    batch_timeout_seconds: 1.5") + 1
    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path / "s.yaml")
    assert [str(p) for p in raised.value.problems] == [
        f"{tmp_path / 's.yaml'}: $.args.service.batch_timeout_seconds: found NaN (not a number): {FINITE} "
        f"(line {line}, column 5)"]


@pytest.mark.parametrize("value, what", [(float("nan"), "NaN (not a number)"), (float("-inf"), "-infinity")])
def test_a_dict_config_refuses_them_too_naming_every_one(ids_dir, value, what):
    """In memory there is no line: the JSON path, for each of them, in document order."""
    import numpy as np

    cfg = loader_config(ids_dir, [("id", "id"), ("x", "x")], inputs=["id", "x"], padding=[
        {"tensor": "x", "value": value}],
                        processing_steps=[{"tensor": "x", "type": "clip", "args": {"min": np.float32(value)}}])
    with pytest.raises(ConfigError) as raised:
        load_config(cfg)
    assert [str(p) for p in raised.value.problems] == [
        f"<dict>: $.args.padding[0].value: found {what}: {FINITE}",
        f"<dict>: $.args.processing_steps[0].args.min: found {what}: {FINITE}"]


def test_finite_floats_still_load(tmp_path, ids_dir):
    cfg = loader_config(ids_dir, [("id", "id"), ("x", "x")], inputs=["id", "x"],
                        processing_steps=[{"tensor": "x", "type": "clip", "args": {"min": -1.5e30, "max": 2.5}}])
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    step = load_config(tmp_path / "c.yaml").processing_steps[0]
    assert dict(step.args) == {"min": -1.5e30, "max": 2.5}


# ---------------------------------------------------------------------------------------------
# A tiny weight: the draws stop at each source's records.

def _counted(root, name: str, base: int, n: int, *, counts: bool = True, compression=None) -> str:
    """A dataset of one file of ``n`` records holding id = base + r; with ``counts``, its manifest lists them."""
    from batchloaders.cli.main import main

    d = root / name
    write_manifest(d, [feature("id", "int64", [], "int")], compression=compression)
    suffix = ".tfrecords.gz" if compression else ".tfrecords"
    write_records(d / f"part-0{suffix}", [example(id=("int", [base + r])) for r in range(n)], compression)
    if counts:
        with pytest.raises(SystemExit):
            main(["manifest", str(d)])
    return str(d)


SIZES = (6, 40, 30)  # source 0 the small one, its records 0..5; source 1: 1000..1039; source 2: 2000..2029


def _three(tmp_path, weights, *, counts=True, **args) -> dict:
    dirs = [_counted(tmp_path, f"s{i}", 1000 * i, n, counts=counts) for i, n in enumerate(SIZES)]
    cfg = _mixture(dirs[0], weights)
    for source, d in zip(cfg["args"]["sources"], dirs):
        source["dataset"]["args"]["data_dir"] = d
    cfg["args"].update(target_batch_size=5, mixing={"exhausted": "continue"}, seed=11, **args)
    return cfg


def _ids_within(cfg, seconds: float = 300.0) -> list[int]:
    """Every id of the run, in order; a run still going after ``seconds`` (a hang, not a slow run) fails."""
    import threading

    got, failed, done = [], [], threading.Event()

    def run():
        try:
            got.extend(i for batch in build_input_fn(cfg)() for i in batch["id"].numpy().tolist())
        except Exception as error:  # raised below, in the test's thread
            failed.append(error)
        finally:
            done.set()
    threading.Thread(target=run, daemon=True).start()
    assert done.wait(seconds), f"the run was still drawing after {seconds} s, with {len(got)} ids delivered"
    if failed:
        raise failed[0]
    return got


def test_the_draws_stop_at_each_sources_records(tmp_path):
    """Weight 1e-300 beside two of 1: one draw per record and one that finds each source's end, then no more:
    79 draws for 76 records, not ~1e300."""
    from batchloaders.loaders import mixture
    from batchloaders.read import sharding

    config = load_config(_three(tmp_path, [1e-300, 1, 1]))
    mix = mixture.plan(config, sharding.plan_sources(config, None))
    assert mixture.budgets(mix) == list(SIZES)
    draws = list(mixture._choices(mix).take(1000).as_numpy_iterator())
    assert sorted(draws) == [0] * 7 + [1] * 41 + [2] * 31
    assert draws[-7:] == [0] * 7  # the small source drawn once the others ran out


@pytest.mark.parametrize("weight", [1e-6, 1e-300, 5e-324])
@pytest.mark.parametrize("counts", [True, False], ids=["counts", "sizes"])
def test_any_weight_finishes_with_every_record(tmp_path, weight, counts):
    """The issue's case (weights [w, 1, 1], exhausted continue): 1e-6 took minutes, 1e-300 and 5e-324 never ended.
    With the manifests' counts the draws stop at each source's records; without them, at as many records as an
    uncompressed file of its size can hold."""
    got = _ids_within(_three(tmp_path, [weight, 1, 1], counts=counts))
    assert sorted(got) == list(range(6)) + list(range(1000, 1040)) + list(range(2000, 2030))
    if weight < 1e-300:  # too small for a float64 share: drawn only once the others have run out
        assert got[-6:] == list(range(6))


@pytest.mark.parametrize("weights", [(1e-6, 1, 1), (1, 1, 1)])
@pytest.mark.parametrize("mode", ["replay", "state"])
def test_a_mix_restored_after_a_source_ran_out_resumes_and_ends(tmp_path, mode, weights):
    """The draws among the running sources alone (their share below 1/16) restore mid-run in either mode, and the
    restored run ends: choose_from_datasets, restored after a source ran out, takes it for running still, and
    drew on for ever once the last one ran out (with any weights)."""
    from conftest import resumed_ids

    cfg = _three(tmp_path, list(weights), resume=mode)
    whole, resumed = resumed_ids(cfg, tmp_path, stop=13)  # (16 batches of at most 5: every source ran out)
    assert resumed == whole and sorted(i for batch in whole for i in batch) == (
        list(range(6)) + list(range(1000, 1040)) + list(range(2000, 2030)))


@pytest.mark.parametrize("weights, mixing", [((1, 3, 2), {}), ((5, 1, 1), {"batches": "per_source"})])
def test_ordinary_weights_keep_the_order_of_the_endless_draws(tmp_path, monkeypatch, weights, mixing):
    """The draws stop at each source's records, and while the sources still running hold 1/16 of the weight they
    are the endless stream's draws with the spent sources' left out: the batches of a mix without limits."""
    from batchloaders.loaders import mixture

    cfg = _three(tmp_path, weights, epochs=2, shuffle=True, num_shuffle_buffer_elements=8,
                 num_filenames_shuffle_buffer=1, num_mix_files=1)
    cfg["args"]["mixing"].update(mixing)
    planned = _ids_within(cfg)
    assert sorted(planned) == sorted(2 * (list(range(6)) + list(range(1000, 1040)) + list(range(2000, 2030))))
    monkeypatch.setattr(mixture, "budgets", lambda *args, **kwargs: None)
    assert _ids_within(cfg) == planned


def test_a_small_weight_beside_an_uncounted_compressed_source_is_refused(tmp_path):
    """Nothing bounds what a GZIP file without counts holds: its draws go on after it has run out, so a source
    left running at 1/1,000 of its weight would cost 1,000 draws an example."""
    small = _counted(tmp_path, "small", 0, 6)
    big = _counted(tmp_path, "big", 1000, 40, counts=False, compression="gzip")
    cfg = _mixture(small, [0.5, 1000])
    cfg["args"]["sources"][1]["dataset"]["args"]["data_dir"] = big
    with pytest.raises(ConfigError) as raised:
        load_config(cfg)
    assert [str(p) for p in raised.value.problems] == [
        "<dict>: $.args.sources[0].weight: found 0.5 for source 's0', less than 1/1,000 of the weight of source "
        "'s1' (1000), whose examples nothing counts (its manifest lists no counts for its compressed or remote "
        "files, or its windows are cut from feature lists): with exhausted continue, once that source has run out "
        "it would still be drawn, about 2,000 times for each example of this one; expected a weight of at least 1, "
        "record counts in that manifest (`batchloaders manifest DIR`), or exhausted stop or repeat"]
    cfg["args"]["sources"][0]["weight"] = 1
    assert [s.weight for s in load_config(cfg).sources] == [1, 1000]
    cfg["args"]["sources"][0]["weight"] = 0.5
    cfg["args"]["mixing"] = {"exhausted": "stop"}
    assert [s.weight for s in load_config(cfg).sources] == [0.5, 1000]


# ---------------------------------------------------------------------------------------------
# A listed file gone before the build.

@pytest.fixture
def five_files(tmp_path):
    """part-0..part-4 of 100 records each (id = 1000 * f + r), counted by `batchloaders manifest`; part-2
    then deleted. Returns (the dataset's directory, the line of part-2's entry in the manifest)."""
    from batchloaders.cli.main import main

    d = tmp_path / "five"
    write_manifest(d, [feature("id", "int64", [], "int")])
    for f in range(5):
        write_records(d / f"part-{f}.tfrecords", [example(id=("int", [1000 * f + r])) for r in range(100)])
    with pytest.raises(SystemExit):
        main(["manifest", str(d)])
    lines = (d / "__manifest__.json").read_text().splitlines()
    name = next(i for i, text in enumerate(lines) if '"name": "part-2.tfrecords"' in text)
    assert lines[name - 1].strip() == "{"
    (d / "part-2.tfrecords").unlink()
    return d, name  # (the entry's "{" is on line ``name``, counting from 1)


def _missing_message(d, line: int) -> str:
    return (f"{d / '__manifest__.json'}: $.files[2]: data file {d / 'part-2.tfrecords'} is missing, but the "
            "manifest lists it with 100 records, which would not be read: it was deleted or moved after the "
            f"manifest was written; restore it, or run `batchloaders manifest` on {d} to record the files there "
            f"are (line {line})")


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_listed_file_deleted_before_the_build_is_an_error(tmp_path, five_files, shuffle):
    """The issue: validate, check-data and describe said OK and every shuffle mode read 400 of the 500 records."""
    d, line = five_files
    cfg = loader_config(d, [("id", "id")], inputs=["id"], shuffle=shuffle,
                        **({"num_shuffle_buffer_elements": 64, "num_filenames_shuffle_buffer": 2,
                            "num_mix_files": 2, "seed": 1} if shuffle else {}))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    for load in (load_config, build_input_fn):  # (a ManifestError: only the manifest's files disagree)
        with pytest.raises(ManifestError) as raised:
            load(tmp_path / "c.yaml")
        assert [str(p) for p in raised.value.problems] == [_missing_message(d, line)]


def test_check_data_and_describe_name_the_missing_file(tmp_path, five_files):
    import io

    from batchloaders.cli import check_data

    d, line = five_files
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(loader_config(d, [("id", "id")], inputs=["id"])))
    out = io.StringIO()
    assert check_data.run(str(tmp_path / "c.yaml"), out=out) == 1
    assert out.getvalue().splitlines()[-2:] == [
        f"{d / 'part-2.tfrecords'}: missing: the manifest {d / '__manifest__.json'} lists it (line {line}) with "
        "100 records", "1 of 5 files have problems"]
    result = subprocess.run([sys.executable, "-m", "batchloaders", "describe", str(tmp_path / "c.yaml")],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 1 and _missing_message(d, line) in result.stderr


def test_a_mixtures_other_source_is_checked_too(tmp_path, five_files):
    d, line = five_files
    cfg = _mixture(_counted(tmp_path, "other", 0, 6), [1, 1])
    cfg["args"]["sources"][1]["dataset"]["args"]["data_dir"] = str(d)
    with pytest.raises(ManifestError) as raised:
        load_config(cfg)
    assert [str(p) for p in raised.value.problems] == [_missing_message(d, line)]


def test_a_file_the_pattern_leaves_out_is_not_missing(five_files):
    """A manifest may list files a config's pattern does not read (a split); the ones read keep their counts."""
    d, _ = five_files
    config = load_config(loader_config(d, [("id", "id")], inputs=["id"], target_batch_size=50, dataset={
        "type": "dir", "args": {"data_dir": str(d), "pattern": "part-[34].tfrecords"}}))
    assert [os.path.basename(f) for f in config.dataset.files] == ["part-3.tfrecords", "part-4.tfrecords"]
    assert build_input_fn(config)().cardinality().numpy() == 4


def test_writing_the_manifest_again_records_the_files_there_are(five_files):
    from batchloaders.cli.main import main

    d, _ = five_files
    with pytest.raises(SystemExit):
        main(["manifest", str(d)])
    config = load_config(loader_config(d, [("id", "id")], inputs=["id"], target_batch_size=100))
    got = sorted(i for batch in build_input_fn(config)() for i in batch["id"].numpy().tolist())
    assert got == [1000 * f + r for f in (0, 1, 3, 4) for r in range(100)]
