"""What mixing costs: one source against the same files split into two mixed sources (``args.sources``),
and ours mixed against the idiomatic way to mix (``tf.data.Dataset.sample_from_datasets``).

    python benchmarks/mixture.py                                  # both cases, 7 rounds
    python benchmarks/mixture.py --cases floats64 --rounds 2      # a quick look: figures, no verdict

For each case, our config of run.py's case of that name (``cases()``: 4 files read at once, 2 parallel
parses, 4 batches prefetched, 1 MiB read buffers, one epoch, unshuffled, ``drop_remainder: false``) in
the forms below, which read the same 16 files of benchmarks/data once each:

* one source: the config as run.py writes it (``dataset`` + ``primary_features``);
* mixed: two sources of 8 files each (a ``dir`` dataset with a ``pattern``: ``part-0[0-7]`` and the
  rest), no weights (proportional to their record counts), ``mixing: {batches: mixed}``: examples drawn
  one by one from the sources, then batched;
* per_source: the same two sources, ``mixing: {batches: per_source}``: each batch drawn whole from one;
* stratified: the same two sources, ``mixing: {batches: stratified, exhausted: stop}``: every batch holds
  a fixed number of examples of each source (half of it here); the halves hold as many records, so both
  run out with the same batch and every record is read once. Where the package has no such mode (an older
  version), the form is left out and the run says the mode is not available; any other refusal fails the run;
* sample_from_datasets (the rival, not ours): each half's idiomatic pipeline (benchmarks/idiomatic.py's
  form: files interleaved 4 at a time, a 1 MiB read buffer) down to single examples (64 floats: batch,
  one vectorized parse, ``unbatch``; speech: each record parsed, as a parse of a batch would pad the
  frames to its longest), mixed with ``tf.data.Dataset.sample_from_datasets`` (the halves' weights,
  proportional to their record counts as ours; seeded) before batching, then ``batch`` (``padded_batch``
  for speech) and ``prefetch(AUTOTUNE)``: what a user writes who mixes with tf.data.

``exhausted`` is otherwise the default ``continue`` (the rival's ``stop_on_empty_dataset=False``), so every
record of every source is read once per epoch.

Cases: ``speech_padded`` (batches of 32, padded per batch; frames/s from the non-zero labels) and
``floats64`` (batches of 256 of small examples: the worst case for a per-example draw).

Each form of ours has one ``input_fn`` (built once, not timed), called once per epoch. Every form's first
epoch is a check (harness.epoch, hashed): every form must yield the same examples (the multiset of
per-example digests, padding cut off) and as many of them; the batches may differ (per_source ends each
source with its own partial batch); the rival must also do the same work as mixed (harness.same_work:
the same examples in batches of the same sizes). Then ``--rounds`` whole epochs per form, alternating,
the order rotating each round, nothing done per batch but taking the time; steady rates after the first
10% of batches (harness.WARMUP_FRACTION). Compared over paired rounds (benchmarks/verdict.py: per round
the ratio of the two forms' steady rates in the case's rate, their median and spread): mixed against the
rival (target >= 1.0x), stratified against one source (target >= 0.9x on floats64), and every form
against one source; a verdict needs 7 rounds. Prints a markdown table of medians, the paired ratios,
the load average at the start and the end; writes benchmarks/out/mixture.json (gitignored). The data
directory is read only (``--data``, default ``DATA``: benchmarks/data, as bench_data writes it); nothing is written
there. Exits 1 when a form fails or its examples differ from one source's.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # the repository, when the package is not installed
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench_data  # noqa: E402
import harness  # noqa: E402
import idiomatic as idm  # noqa: E402
import run  # noqa: E402  (the cases' configs and the machine's description)
import verdict  # noqa: E402

import tensorflow as tf  # noqa: E402

from batchloaders import build_input_fn  # noqa: E402

DATA = os.environ.get("BATCHLOADERS_BENCH_DATA", bench_data.ROOT)
OUT = os.path.join(HERE, "out", "mixture.json")
CASES = ("speech_padded", "floats64")
HALVES = ("part-0[0-7].tfrecords", "part-{08,09,1?}.tfrecords")  # 16 files: part-00 .. part-15
HALF_FILES = (lambda name: name < "part-08", lambda name: name >= "part-08")  # the same halves, for the rival
OURS = ("one source", "mixed", "per_source", "stratified")
RIVAL = "sample_from_datasets"
FORMS = OURS + (RIVAL,)
SEED = 1
# (form, against it, target or None): the paired comparisons, each the median of per-round rate ratios.
COMPARED = (("mixed", RIVAL, verdict.Target("ratio", 1.0, True)),
            ("stratified", "one source", verdict.Target("ratio", 0.9, True)),
            ("mixed", "one source", None), ("per_source", "one source", None), (RIVAL, "one source", None))


def configs(case: run.Case, directory: str) -> dict[str, dict]:
    """Our forms of the case's config over ``directory``."""
    one = run.with_data(case.config, directory)
    out = {"one source": one}
    for batches in OURS[1:]:
        cfg = json.loads(json.dumps(one))
        args = cfg["args"]
        dataset, primary = args.pop("dataset"), args.pop("primary_features")
        args["sources"] = [{"name": f"half{i}",
                            "dataset": {"type": dataset["type"], "args": {**dataset["args"], "pattern": pattern}},
                            "primary_features": primary} for i, pattern in enumerate(HALVES)]
        # stratified refuses continue (a source run out could no longer fill its share); the halves are
        # of one size at equal shares, so stop ends the epoch with both spent: every record read once.
        args["mixing"] = {"exhausted": "stop" if batches == "stratified" else "continue", "batches": batches}
        out[batches] = cfg
    return out


def halves(directory: str) -> tuple[list, list]:
    """The two halves' files and their weights: their record counts, from the manifest (as ours weighs
    sources without a weight)."""
    with open(os.path.join(directory, "__manifest__.json")) as f:
        counts = {entry["name"]: entry["num_records"] for entry in json.load(f)["files"]}
    files = [[p for p in bench_data.files(directory) if keep(os.path.basename(p))] for keep in HALF_FILES]
    return files, [float(sum(counts[os.path.basename(p)] for p in half)) for half in files]


def rival(case: run.Case, directory: str):
    """make() of the rival: each half's idiomatic pipeline down to examples, sample_from_datasets, batch."""
    files, weights = halves(directory)
    padded = case.lengths_of is not None

    def examples(half):
        records = idm._interleave(half, idm._reader)
        if padded:  # a parse of a batch pads its frames to its longest: parse each record
            return records.map(idm.speech_one, num_parallel_calls=idm.AUTOTUNE)
        return records.batch(case.batch_size).map(case.parse, num_parallel_calls=idm.AUTOTUNE).unbatch()

    def make():
        mixed = tf.data.Dataset.sample_from_datasets([examples(h) for h in files], weights=weights, seed=SEED,
                                                     stop_on_empty_dataset=False)
        batched = mixed.padded_batch(case.batch_size) if padded else mixed.batch(case.batch_size)
        return batched.prefetch(idm.AUTOTUNE)
    return make


def mixture_modes() -> set[str]:
    """The mixing.batches modes the installed package has (stratified is one of its own module's)."""
    from batchloaders.loaders import mixture

    return {"mixed", "per_source", *getattr(mixture, "MODES", {})}


def makes_of(case: run.Case, directory: str) -> tuple[dict, dict, dict]:
    """make() per form, each form's config, and the forms left out (form -> why)."""
    cfgs, makes, left = configs(case, directory), {}, {}
    for form in OURS:
        if form == "stratified" and form not in mixture_modes():
            left[form] = "not available: this batchloaders has no mixing.batches: stratified"
            print(f"  {case.name} / {form}: {left[form]}", flush=True)
            continue
        makes[form] = build_input_fn(cfgs[form])  # any refusal of a form the package has is a failure
    makes[RIVAL] = rival(case, directory)
    return makes, cfgs, left


def same_examples(case: run.Case, checks: dict) -> tuple[dict, dict]:
    """Per form: "yes" or what differs from one source's examples (and, for the rival, from mixed's
    work: harness.same_work); and the errors that makes."""
    base, same, errors = checks.get("one source"), {}, {}
    for form, c in checks.items():
        if form == "one source" or base is None:
            continue
        problems = []
        if sum(c.examples) != sum(base.examples):
            problems.append(f"{sum(c.examples):,} examples, one source {sum(base.examples):,}")
        if c.multiset != base.multiset:
            problems.append("other examples (multiset of per-example digests)")
        if case.frames_of and sum(c.frames) != sum(base.frames):
            problems.append(f"{sum(c.frames):,} frames, one source {sum(base.frames):,}")
        if form == RIVAL and "mixed" in checks:
            other = harness.same_work(checks["mixed"], c)
            if other:
                problems.append(f"not the same work as mixed: {other}")
        same[form] = "; ".join(problems) or "yes"
        if problems:
            errors[form] = "not the same examples: " + same[form]
            print(f"  ERROR {case.name} / {form}: {errors[form]}", flush=True)
    return same, errors


def run_case(case: run.Case, directory: str, rounds: int) -> dict:
    makes, cfgs, left = makes_of(case, directory)
    checks, timed, errors = {}, {f: [] for f in FORMS}, {}
    for form in makes:
        try:
            checks[form] = harness.epoch(makes[form], case.frames_of, lengths_of=case.lengths_of)
            c = checks[form]
            print(f"  {case.name} / {form}: check epoch {c.round.epoch_s:.1f} s, {sum(c.examples):,} examples in "
                  f"{len(c.examples):,} batches", flush=True)
        except Exception:
            errors[form] = traceback.format_exc(limit=3).strip().splitlines()[-1]
            print(f"  ERROR {case.name} / {form}: {errors[form]}", flush=True)
    same, wrong = same_examples(case, checks)
    errors.update(wrong)
    alive = [f for f in FORMS if f in checks]
    for r in range(rounds):
        order = alive[r % len(alive):] + alive[:r % len(alive)] if alive else []
        for form in order:
            try:
                timed[form].append(harness.epoch(makes[form], checked=checks[form]))
            except Exception:
                errors[form] = traceback.format_exc(limit=3).strip().splitlines()[-1]
                print(f"  ERROR {case.name} / {form} round {r + 1}: {errors[form]}", flush=True)
        print(f"  {case.name} round {r + 1}: " + ", ".join(
            f"{f} {timed[f][-1].examples_per_s:,.0f} ex/s" for f in order if timed[f]), flush=True)
    return {"case": case.name, "batch_size": case.batch_size, "rate": case.rate,
            "forms": {form: form_result(form, checks.get(form), timed[form], cfgs.get(form),
                                        errors.get(form) or left.get(form), same.get(form)) for form in FORMS},
            "compared": compared(case, timed)}


def form_result(form: str, c, timed: list, cfg, error, same) -> dict:
    def median(field):
        values = [getattr(x, field) for x in timed]
        return None if not values or values[0] is None else statistics.median(values)

    return {"config": cfg, "error": error, "same_examples": same,
            "examples": sum(c.examples) if c else None, "batches": len(c.examples) if c else None,
            "frames": sum(c.frames) if c and c.frames and c.frames[0] is not None else None,
            "check_epoch": c.round.__dict__ if c else None,
            "median": {f: median(f) for f in ("examples_per_s", "frames_per_s", "cpu_s", "epoch_s", "build_ms",
                                              "first_ms", "memory_mb")},
            "rounds": [x.__dict__ for x in timed]}


def compared(case: run.Case, timed: dict) -> list[dict]:
    """The paired comparisons (COMPARED) in the case's rate: median of per-round ratios, spread, verdict
    (the stratified target is the issue's on 64-float examples only)."""
    out = []
    for form, against, target in COMPARED:
        spread = verdict.paired([getattr(x, case.rate) for x in timed[form]],
                                [getattr(x, case.rate) for x in timed[against]])
        if target is not None and form == "stratified" and case.name != "floats64":
            target = None
        judged = None if target is None else (
            verdict.verdict(spread, target) if spread else f"no verdict ({form} did not run)")
        out.append({"form": form, "against": against, "text": verdict.describe(spread),
                    "target": None if target is None else verdict.bound_text(target), "verdict": judged,
                    "spread": None if spread is None else spread.__dict__})
    return out


def _num(v, digits=0):
    return "-" if v is None else f"{v:,.{digits}f}"


def table(results: list[dict]) -> list[str]:
    """Medians per form (columns) and rate (rows)."""
    lines = ["| case | rate | " + " | ".join(FORMS) + " |", "| --- | --- |" + " ---: |" * len(FORMS)]
    for res in results:
        fields = ["examples_per_s"] + (["frames_per_s"] if res["forms"]["one source"]["frames"] else [])
        for field in fields + ["cpu_s"]:
            unit = {"examples_per_s": "examples/s", "frames_per_s": "frames/s", "cpu_s": "CPU s/epoch"}[field]
            values = [_num(res["forms"][f]["median"][field], 2 if field == "cpu_s" else 0) for f in FORMS]
            lines.append(f"| {res['case']} (batch {res['batch_size']}) | {unit} | " + " | ".join(values) + " |")
    return lines


def ratios(results: list[dict]) -> list[str]:
    """The paired comparisons: median (lowest-highest, IQR), target, verdict."""
    lines = ["| case | form | against | median of paired ratios (lowest-highest, IQR) | target | verdict |",
             "| --- | --- | --- | ---: | --- | --- |"]
    for res in results:
        for c in res["compared"]:
            rate = res["rate"].replace("_per_s", "/s")
            lines.append(f"| {res['case']} ({rate}) | {c['form']} | {c['against']} | {c['text']} | "
                         f"{c['target'] or ''} | {c['verdict'] or ''} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=verdict.MIN_ROUNDS,
                        help=f"alternating whole-epoch rounds (default {verdict.MIN_ROUNDS}; fewer: no verdict)")
    parser.add_argument("--cases", nargs="*", choices=CASES, default=list(CASES), metavar="CASE",
                        help="of: " + ", ".join(CASES))
    parser.add_argument("--data", default=DATA, help=f"the benchmark data, read only (default {DATA})")
    parser.add_argument("--output", default=OUT, help="JSON results (default benchmarks/out/mixture.json)")
    args = parser.parse_args(argv)

    started, load_start = time.perf_counter(), os.getloadavg()
    info = run.machine()
    print(f"machine: {info['usable_cpus']} usable of {info['cpus']} CPUs ({info['cpu']}); TensorFlow "
          f"{info['tensorflow']}; Python {info['python']}; load average {_load()} (1, 5, 15 min)", flush=True)
    by_name = {c.name: c for c in run.cases()}
    results = []
    for name in args.cases:
        case = by_name[name]
        directory = os.path.join(args.data, case.data)
        if not os.path.isfile(os.path.join(directory, "__manifest__.json")):
            parser.error(f"no benchmark data at {directory} (run benchmarks/run.py once to write it)")
        print(f"running {name} (load average {_load()}) ...", flush=True)
        load = os.getloadavg()
        results.append(run_case(case, directory, args.rounds))
        results[-1]["load_average"] = {"start": load, "end": os.getloadavg()}
    total = time.perf_counter() - started
    print()
    print(f"Medians of {args.rounds} alternating whole-epoch rounds; steady rates after the first 10% of batches. "
          f"one source: 16 files; mixed, per_source, stratified: two sources of 8 files; {RIVAL}: each half's "
          "idiomatic pipeline mixed example by example with tf.data.Dataset.sample_from_datasets, then batched.")
    for line in table(results):
        print(line)
    print()
    print("Paired rounds: per round the form's steady rate (the case's rate) / the other's, both timed in that "
          f"round; the median of those ratios with its spread. A verdict needs >= {verdict.MIN_ROUNDS} rounds.")
    for line in ratios(results):
        print(line)
    for res in results:
        for form in FORMS[1:]:
            f = res["forms"][form]
            if f["batches"] is None:
                print(f"{res['case']} / {form}: {f['error']}")
                continue
            print(f"{res['case']} / {form}: same examples as one source: {f['same_examples']}; "
                  f"{f['batches']} batches (one source {res['forms']['one source']['batches']})")
    print(f"load average at start {' '.join(f'{v:.2f}' for v in load_start)}, at end {_load()} (1, 5, 15 min); "
          f"total time {total:.0f} s")
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump({"machine": info, "rounds": args.rounds, "data": args.data, "total_s": total,
                   "load_average": {"start": load_start, "end": os.getloadavg()}, "results": results},
                  f, indent=1, default=str)
        f.write("\n")
    print(f"results written to {os.path.relpath(args.output)}")
    unavailable = {"stratified"}  # a form left out as not available is not a failure
    failed = [(r["case"], k) for r in results for k, v in r["forms"].items()
              if v["error"] and not (k in unavailable and v["batches"] is None and "not available" in v["error"])]
    return 1 if failed else 0


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
