"""Fuzz the config and manifest loaders: whatever a user writes, the answer is a result or a BatchLoaderError.

Valid base configs (all three loader types) and manifests of tiny real
datasets are mutated by hypothesis (see tests/fuzz_cases.py) and run in child
processes (tests/fuzz_worker.py), two at a time, so that a crash fails the test
instead of killing it. Every case must:

- validate, or raise a BatchLoaderError whose message names the file;
- never raise anything else, never kill the worker, and answer within
  VALIDATE_TIMEOUT (a hang, not slowness: times are reported, not asserted);
- when it is a build case that validated: build its input_fn and fetch one
  batch within BUILD_TIMEOUT and WORKER_MEMORY_BYTES, where only a
  BatchLoaderError or a TensorFlow error the data caused (one of the package's
  run-time checks, or records that do not match a mutated manifest) may stop
  it. Such data errors pass but are listed in the summary: each is a value
  that validation let through.

Explicit regression cases below cover every bad input users have reported. Documents built to take long
(deep nesting, alias bombs) are held to a count of the Python calls their validation makes: work, which a
loaded machine does not change, where seconds would (validation speed is a figure of the summary).
Run with ``-s`` to see how many cases ran and what came out of them;
``FUZZ_SCALE=4`` runs four times as many; ``make fuzz`` runs the fuzz tests at scale 8.
"""
from __future__ import annotations

import collections
import json
import os
import statistics
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzz_cases as fc
from batchloaders.config.config import load_config
from batchloaders.errors import BatchLoaderError
from fuzz_cases import BASE_TEXTS, BASES, Draft

SCALE = float(os.environ.get("FUZZ_SCALE", "1"))
WORKERS = 2  # the cases of one hypothesis example run side by side, one per worker
# No answer within these is a hang, whatever the machine's load: they catch hangs only, never slowness.
# Validation takes ~0.1 s idle; build + first batch (median / max over hundreds of builds) on the 2-core dev
# machine, idle: independent 0.23 / 1.3 s, continuous_sequence 0.65 / 2.4 s, discrete_sequence 0.85 / 2.3 s;
# at load 4-5: 0.6 / 3.0, 1.9 / 4.7, 2.5 / 5.4 s; the first build in a fresh process up to 6.5 s; at load
# 4-9 a build passed 20 s.
VALIDATE_TIMEOUT = 120.0
BUILD_TIMEOUT = 600.0
# Python calls (sys.setprofile "call" events) that refusing a document built to take long may make: the
# valid base config takes about 64,000, refusing 5,000 nested lists at the depth bound about 31,000.
MAX_REFUSAL_CALLS = 100_000
WORKER_MEMORY_BYTES = 4 * 2**30  # resident memory per worker: more is a runaway allocation, and the case fails

# Examples (of WORKERS cases each) per test, bounded by the suite's time budget (docs/decisions/test-suite.md);
# derandomized, so every run tries the same cases: `make fuzz` (FUZZ_SCALE=8) tries many more.
N_CONFIG = int(400 * SCALE)  # mutated configs
N_MANIFEST = int(200 * SCALE)
N_BUILD = int(30 * SCALE)  # each case builds a pipeline and fetches a batch: about 1 s of CPU
N_MANIFEST_BUILD = int(15 * SCALE)
ACCEPTED = {"ok", "batchloader_error", "data_error"}

STATS = {
    "cases": collections.Counter(),  # (test, kind) -> cases
    "outcomes": collections.Counter(),  # (test, outcome) -> cases
    "validate_seconds": [],
    "build_seconds": collections.defaultdict(list),  # loader type -> build + first batch seconds
    "data_errors": [],  # (draft, reply): validated, then TensorFlow failed on the data
    "empty": [],  # drafts whose finite dataset ended before its first batch
    "started": time.monotonic(),
}


def summary() -> str:
    lines = [f"fuzz summary after {time.monotonic() - STATS['started']:.0f} s:"]
    tests = sorted({t for t, _ in STATS["cases"]})
    for test in tests:
        kinds = ", ".join(f"{k} {n}" for (t, k), n in sorted(STATS["cases"].items()) if t == test)
        outcomes = ", ".join(f"{o} {n}" for (t, o), n in sorted(STATS["outcomes"].items()) if t == test)
        lines.append(f"  {test}: {sum(n for (t, _), n in STATS['cases'].items() if t == test)} cases "
                     f"({kinds}); {outcomes}")
    total = sum(STATS["cases"].values())
    lines.append(f"  total: {total} cases")
    v = STATS["validate_seconds"]
    if v:
        lines.append(f"  validation: median {statistics.median(v) * 1000:.1f} ms, max {max(v) * 1000:.0f} ms "
                     f"over {len(v)} cases")
    for loader, times in sorted(STATS["build_seconds"].items()):
        lines.append(f"  build + first batch, {loader}: median {statistics.median(times):.2f} s, "
                     f"max {max(times):.2f} s over {len(times)} builds")
    if STATS["empty"]:
        lines.append(f"  {len(STATS['empty'])} build(s) gave an empty dataset (finite, ended before the first batch), "
                     f"e.g. {STATS['empty'][0].name} {STATS['empty'][0].notes}")
    if STATS["data_errors"]:
        lines.append(f"  {len(STATS['data_errors'])} case(s) validated and then failed in TensorFlow on the data:")
        for draft, reply in STATS["data_errors"][:20]:
            lines.append(f"    {draft.name} {draft.notes}: {reply.get('type')}: {reply.get('why')}: "
                         f"{reply.get('message', '')[:200]!r}")
    return "\n".join(lines)


class Fuzz:
    def __init__(self, fixture, workers):
        self.fixture = fixture
        self.workers = workers


def _warm_up(fixture, worker) -> None:
    """After a (re)start: load the schemas and code paths once, so that no case pays for it."""
    for name, (_, _, suffix) in BASES.items():
        worker.run(fixture.case(Draft("config", name, BASE_TEXTS[name], suffix), worker.slot), VALIDATE_TIMEOUT)


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    fixture = fc.make_fixture(root, WORKERS)
    workers = []
    try:
        for slot in range(WORKERS):
            workers.append(fc.Worker(str(root / f"worker{slot}.log"), on_start=lambda w: _warm_up(fixture, w),
                                     memory_bytes=WORKER_MEMORY_BYTES, slot=slot))
        # Every base document must validate, build and give a batch; this also measures builds.
        names = sorted(BASES)
        for i in range(0, len(names), WORKERS):
            chunk = [Draft("config", n, BASE_TEXTS[n], BASES[n][2], True) for n in names[i:i + WORKERS]]
            replies = fc.run_parallel(workers, [(fixture.case(d, slot), BUILD_TIMEOUT)
                                                for slot, d in enumerate(chunk)])
            for draft, reply in zip(chunk, replies):
                assert reply["outcome"] == "ok", f"the valid base config {draft.name} fails: {reply}"
        for i in range(0, len(fc.MANIFESTS), WORKERS):
            chunk = [Draft("manifest", n, json.dumps(fc.MANIFESTS[n]), ".json", False)
                     for n in sorted(fc.MANIFESTS)[i:i + WORKERS]]
            replies = fc.run_parallel(workers, [(fixture.case(d, slot), VALIDATE_TIMEOUT)
                                                for slot, d in enumerate(chunk)])
            for draft, reply in zip(chunk, replies):
                assert reply["outcome"] == "ok", f"the valid base manifest {draft.name} fails: {reply}"
        yield Fuzz(fixture, workers)
    finally:
        for worker in workers:
            worker.close()
        print("\n" + summary())


def run_drafts(fuzz, test: str, drafts) -> None:
    """Run drafts side by side (one per worker) and assert each came out acceptably."""
    cases = [fuzz.fixture.case(d, slot) for slot, d in enumerate(drafts)]
    timeouts = [BUILD_TIMEOUT if d.build else VALIDATE_TIMEOUT for d in drafts]
    replies = fc.run_parallel(fuzz.workers[:len(drafts)], list(zip(cases, timeouts)))
    failures = []
    for draft, case, reply in zip(drafts, cases, replies):
        problem = record(test, draft, reply)
        if problem:
            failures.append(f"{problem}\n{fc.describe_case(case)}\nmutations: {draft.notes}\nreply: "
                            f"{json.dumps(reply, indent=1)[:6000]}")
    assert not failures, "\n\n".join(failures) + "\n\n" + summary()


def record(test: str, draft: Draft, reply: dict) -> str | None:
    """Count one reply; return what is wrong with it, or None."""
    outcome = reply["outcome"]
    STATS["cases"][(test, draft.kind)] += 1
    STATS["outcomes"][(test, outcome)] += 1
    times = reply.get("times", {})
    if outcome in ("ok", "batchloader_error", "data_error"):
        validated = times.get("validate", reply["seconds"] if reply.get("stage") in ("validate", "manifest")
                              else None)
        if validated is not None:
            STATS["validate_seconds"].append(validated)
        if "fetch" in times:
            STATS["build_seconds"][fc.LOADER_OF_BASE[draft.name]].append(times["fetch"] - times["validate"])
    if outcome == "data_error":
        STATS["data_errors"].append((draft, reply))
    if reply.get("empty"):
        STATS["empty"].append(draft)
    if outcome not in ACCEPTED:
        return f"outcome {outcome}: {reply.get('type', '')} {reply.get('why', '')} {reply.get('message', '')}"
    return None


fuzz_settings = dict(deadline=None, derandomize=True, database=None, print_blob=False,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                            HealthCheck.filter_too_much, HealthCheck.large_base_example])


@settings(max_examples=N_CONFIG, **fuzz_settings)
@given(drafts=st.lists(fc.config_cases(), min_size=WORKERS, max_size=WORKERS))
def test_mutated_configs_validate_or_raise_batchloader_error(fuzz, drafts):
    run_drafts(fuzz, "configs", drafts)


@settings(max_examples=N_MANIFEST, **fuzz_settings)
@given(drafts=st.lists(fc.manifest_cases(), min_size=WORKERS, max_size=WORKERS))
def test_mutated_manifests_validate_or_raise_batchloader_error(fuzz, drafts):
    run_drafts(fuzz, "manifests", drafts)


@settings(max_examples=N_BUILD, **fuzz_settings)
@given(drafts=st.lists(fc.build_cases(), min_size=WORKERS, max_size=WORKERS))
def test_configs_that_validate_build_and_give_a_batch(fuzz, drafts):
    run_drafts(fuzz, "builds", drafts)


@settings(max_examples=N_MANIFEST_BUILD, **fuzz_settings)
@given(drafts=st.lists(fc.manifest_cases(build=True), min_size=WORKERS, max_size=WORKERS))
def test_manifests_that_validate_build_and_give_a_batch(fuzz, drafts):
    run_drafts(fuzz, "manifest builds", drafts)


# ---------------------------------------------------------------------------------------------
# Regression cases: every bad input users have reported, run through the same workers.
# ---------------------------------------------------------------------------------------------


def _with(base: str, path: tuple, value, *, suffix=None, build=True) -> Draft:
    """The base config with the value at ``path`` replaced (or deleted when value is DELETE)."""
    _, doc, base_suffix = BASES[base]
    doc = json.loads(json.dumps(doc))
    node = doc
    for part in path[:-1]:
        node = node[part]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    suffix = suffix or base_suffix
    return Draft("config", base, fc.dump(doc, suffix), suffix, build, [f"{path} = {value!r}"])


def _yaml_value(base: str, key: str, text: str) -> Draft:
    """The base YAML config with the text of the (unique) ``key:`` line's value replaced verbatim."""
    lines = BASE_TEXTS[base].split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:")]
    assert len(hits) == 1, (key, hits)
    i = hits[0]
    lines[i] = lines[i][:lines[i].index(":") + 1] + " " + text
    return Draft("config", base, "\n".join(lines), ".yaml", False, [f"{key}: {text[:60]}"])


def _manifest(dataset: str, feature: str, key: str, value, build=True) -> Draft:
    doc = json.loads(json.dumps(fc.MANIFESTS[dataset]))
    for f in doc["features"]:
        if f["name"] == feature:
            f[key] = value
    return Draft("manifest", dataset, json.dumps(doc), ".json", build, [f"{feature}.{key} = {value!r}"])


DELETE = object()
LAUGHS_7 = fc.billion_laughs(levels=7)  # 7 lines, 9**6 = 531441 strings when expanded
BAD = "batchloader_error"
REGRESSIONS = [
    # integers past TensorFlow's int32 / int64 for parallelism, buffers and sizes
    *[(f"{key}=2**31", _with("indep", ("args", key), 2**31), {BAD}) for key in (
        "num_parallel_reads", "num_parallel_parses", "num_read_buffer_bytes", "num_prefetch", "num_mix_files",
        "num_shuffle_buffer_elements", "num_filenames_shuffle_buffer", "num_interleave_out_buffer_elements",
        "num_interleave_in_buffer_elements")],
    ("disc num_parallel_reads=2**31", _with("disc", ("args", "num_parallel_reads"), 2**31), {BAD}),
    ("cont num_mix_files=2**31", _with("cont", ("args", "num_mix_files"), 2**31), {BAD}),
    *[(f"{key}=2**63", _with("indep", ("args", key), 2**63), {BAD}) for key in (
        "target_batch_size", "num_read_buffer_bytes", "num_shuffle_buffer_elements", "seed")],
    ("indep_gz epochs=2**63", _with("indep_gz", ("args", "epochs"), 2**63), {BAD}),
    ("cont max_window=2**63", _with("cont", ("args", "max_window"), 2**63), {BAD}),
    ("cont stride=2**63", _with("cont", ("args", "stride"), 2**63), {BAD}),
    ("disc max_window=2**63", _with("disc", ("args", "max_window"), 2**63), {BAD}),
    ("const shape [2**63]", _with("indep", ("args", "secondary_features", 1, "args", "shape"), [2**63]), {BAD}),
    ("padding shape [2**63]", _with("indep", ("args", "padding", 0, "shape"), [2**63]), {BAD}),
    ("target_batch_size=10**9", _with("indep", ("args", "target_batch_size"), 1000000000), {BAD}),
    # manifests
    ("manifest shape [0] on a var_len feature", _manifest("cont_seq", "x", "shape", [0]), {BAD}),
    ("manifest shape [0] on a discrete feature list", _manifest("disc", "frames", "shape", [0]), {BAD}),
    ("manifest shape [2**31]", _manifest("indep", "x", "shape", [2**31]), {BAD}),
    ("manifest shape [2**63]", _manifest("indep", "x", "shape", [2**63]), {BAD}),
    # YAML that is not plain data
    ("!!int abc", _yaml_value("indep", "seed", "!!int abc"), {BAD}),
    ("!!timestamp", _yaml_value("indep", "seed", "!!timestamp 2001-12-14"), {BAD}),
    ("!!set", _yaml_value("indep", "seed", "!!set {a, b}"), {BAD}),
    ("!!python/object", _yaml_value("indep", "seed", "!!python/object/apply:os.system ['true']"), {BAD}),
    ("recursive alias at the top", Draft("config", "indep", "a: &x [*x]\n", ".yaml"), {BAD}),
    ("recursive alias in a value", _yaml_value("indep", "seed", "&x [*x]"), {BAD}),
    ("5000 nested lists", _yaml_value("indep", "seed", "[" * 5000 + "]" * 5000), {BAD}),
    ("5000 nested lists, whole document", Draft("config", "indep", "[" * 5000 + "]" * 5000, ".yaml"), {BAD}),
    ("5000 nested maps", _yaml_value("indep", "seed", "{a: " * 5000 + "1" + "}" * 5000), {BAD}),
    ("5000 nested JSON lists", Draft("config", "indep_gz", "[" * 5000 + "]" * 5000, ".json"), {BAD}),
    ("billion laughs, 7 lines", Draft("config", "indep", LAUGHS_7, ".yaml"), {BAD}),
    ("billion laughs in a value", _yaml_value("indep", "seed", fc.billion_laughs_value(9)), {BAD}),
    ("5000-digit integer", _yaml_value("indep", "seed", "1" * 5000), {BAD}),
    # found by this fuzzer
    ("NUL character in YAML", Draft("config", "indep", "\x00", ".yaml"), {BAD}),
    ("BEL character in a YAML value", _yaml_value("indep", "name", "a\x07b"), {BAD}),
    ("U+FFFE in a JSON string", Draft("config", "indep_gz", '{"name": "\ufffe"}', ".json"), {BAD}),
    ("slice index of 5000 digits", _with("indep", ("args", "processing_steps", 0, "args", "slice"),
                                         "[" + "1" * 5000 + "]"), {BAD}),
    ("slice index of 5000 zeros", _with("indep", ("args", "processing_steps", 0, "args", "slice"),
                                        "[" + "0" * 5000 + "]"), {BAD}),  # index 0: x turns scalar, its padding misfits
    # unicode
    ("unicode name", _with("indep", ("name",), "日本語 🙂 \u202e"), {"ok"}),
    ("unicode key", _yaml_value("indep", "seed", "1\n名前: x"), {BAD}),
    ("unicode data_dir", _with("indep", ("args", "dataset", "args", "data_dir"), "../data/indép"), {BAD}),
    # floats where integers belong
    ("target_batch_size 1.0", _yaml_value("indep", "target_batch_size", "1.0"), {BAD}),
    ("target_batch_size 1e400", _yaml_value("indep", "target_batch_size", "1e400"), {BAD}),
    ("target_batch_size 1.0e+400", _yaml_value("indep", "target_batch_size", "1.0e+400"), {BAD}),
    ("target_batch_size .nan", _yaml_value("indep", "target_batch_size", ".nan"), {BAD}),
    ("target_batch_size .inf", _yaml_value("indep", "target_batch_size", ".inf"), {BAD}),
    ("JSON NaN", Draft("config", "indep_gz", BASE_TEXTS["indep_gz"].replace('"target_batch_size": 3',
                                                                            '"target_batch_size": NaN'), ".json"),
     {BAD}),
    ("JSON 1e400", Draft("config", "indep_gz", BASE_TEXTS["indep_gz"].replace('"target_batch_size": 3',
                                                                             '"target_batch_size": 1e400'), ".json"),
     {BAD}),
    # strings, nulls, lists and dicts in place of scalars; deleted and unknown keys
    ("string for an integer", _with("indep", ("args", "target_batch_size"), "three"), {BAD}),
    ("null for an integer", _with("indep", ("args", "num_prefetch"), None), {BAD}),
    ("list for an integer", _with("indep", ("args", "num_prefetch"), [2]), {BAD}),
    ("dict for a string", _with("indep", ("args", "primary_features", 0, "from_name"), {"a": 1}), {BAD}),
    ("list for a bool", _with("indep", ("args", "shuffle"), [True]), {BAD}),
    ("deleted required key", _with("indep", ("args", "target_batch_size"), DELETE), {BAD}),
    ("deleted dataset", _with("cont", ("args", "dataset"), DELETE), {BAD}),
    ("unknown key", _with("indep", ("args", "num_prefetchs"), 2), {BAD}),
    ("unknown top-level key", _with("disc", ("extra",), {}), {BAD}),
]


@pytest.mark.parametrize("name, draft, expected", REGRESSIONS, ids=[r[0] for r in REGRESSIONS])
def test_reported_bad_inputs(fuzz, name, draft, expected, tmp_path):
    case = fuzz.fixture.case(draft, 0)
    reply = fuzz.workers[0].run(case, BUILD_TIMEOUT if draft.build else VALIDATE_TIMEOUT)
    problem = record("regressions", draft, reply)
    details = f"{fc.describe_case(case, 1500)}\nreply: {json.dumps(reply, indent=1)[:4000]}"
    assert problem is None, f"{problem}\n{details}"
    assert reply["outcome"] in expected, f"expected {sorted(expected)}, got {reply['outcome']}\n{details}"
    if "laughs" in name or "nested" in name:  # refused at a bound, not after doing all they ask for
        calls = validation_calls(draft, tmp_path)
        assert calls <= MAX_REFUSAL_CALLS, f"{calls:,} Python calls: expected at most {MAX_REFUSAL_CALLS:,}\n{details}"


def validation_calls(draft: Draft, directory) -> int:
    """The Python calls ``load_config`` makes to refuse a document (run in this process, after the worker
    showed it is refused), counted on the second run: the first also imports and compiles what it needs."""
    path = directory / f"case{draft.suffix}"
    path.write_text(draft.text)
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event == "call"

    for _ in range(2):
        calls = 0
        sys.setprofile(count)
        try:
            load_config(str(path))
        except BatchLoaderError:
            pass
        finally:
            sys.setprofile(None)
    return calls
