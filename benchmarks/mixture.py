"""What mixing costs: one source against the same files split into two mixed sources (``args.sources``).

    python benchmarks/mixture.py                                  # both cases, 3 rounds
    python benchmarks/mixture.py --cases floats64 --rounds 5

For each case, our config of run.py's case of that name (``cases()``: 4 files read at once, 2 parallel
parses, 4 batches prefetched, 1 MiB read buffers, one epoch, unshuffled, ``drop_remainder: false``) in
three forms that read the same 16 files of benchmarks/data once each:

* one source: the config as run.py writes it (``dataset`` + ``primary_features``);
* mixed: two sources of 8 files each (a ``dir`` dataset with a ``pattern``: ``part-0[0-7]`` and the
  rest), no weights (proportional to their record counts), ``mixing: {batches: mixed}``: examples drawn
  one by one from the sources, then batched;
* per_source: the same two sources, ``mixing: {batches: per_source}``: each batch drawn whole from one.

``exhausted`` is the default ``continue``, so every record of every source is read once per epoch.

Cases: ``speech_padded`` (batches of 32, padded per batch; frames/s from the non-zero labels) and
``floats64`` (batches of 256 of small examples: the worst case for a per-example draw).

Each form has one ``input_fn`` (built once, not timed), called once per epoch. Its first epoch is a
check (harness.epoch, hashed): every form must yield the same examples (the multiset of per-example
digests, padding cut off) and as many of them; the batches may differ (per_source ends each source with
its own partial batch). Then ``--rounds`` whole epochs per form, alternating, the order rotating each
round, nothing done per batch but taking the time; steady rates after the first 10% of batches
(harness.WARMUP_FRACTION). Prints a markdown table of medians and each mixed form's ratio to one source,
the load average at the start and the end; writes benchmarks/out/mixture.json (gitignored). The data
directory is read only (``--data``, default ``DATA``: /work/main/benchmarks/data); nothing is written
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

import harness  # noqa: E402
import run  # noqa: E402  (the cases' configs and the machine's description)

from batchloaders import build_input_fn  # noqa: E402

DATA = os.environ.get("BATCHLOADERS_BENCH_DATA", "/work/main/benchmarks/data")
OUT = os.path.join(HERE, "out", "mixture.json")
CASES = ("speech_padded", "floats64")
HALVES = ("part-0[0-7].tfrecords", "part-{08,09,1?}.tfrecords")  # 16 files: part-00 .. part-15
FORMS = ("one source", "mixed", "per_source")


def configs(case: run.Case, directory: str) -> dict[str, dict]:
    """The three forms of the case's config over ``directory``."""
    one = run.with_data(case.config, directory)
    out = {"one source": one}
    for batches in ("mixed", "per_source"):
        cfg = json.loads(json.dumps(one))
        args = cfg["args"]
        dataset, primary = args.pop("dataset"), args.pop("primary_features")
        args["sources"] = [{"name": f"half{i}",
                            "dataset": {"type": dataset["type"], "args": {**dataset["args"], "pattern": pattern}},
                            "primary_features": primary} for i, pattern in enumerate(HALVES)]
        args["mixing"] = {"exhausted": "continue", "batches": batches}
        out[batches] = cfg
    return out


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def run_case(case: run.Case, directory: str, rounds: int) -> dict:
    cfgs = configs(case, directory)
    makes, checks, timed, errors = {}, {}, {f: [] for f in FORMS}, {}
    for form in FORMS:
        try:
            makes[form] = build_input_fn(cfgs[form])
            checks[form] = harness.epoch(makes[form], case.frames_of, lengths_of=case.lengths_of)
            c = checks[form]
            print(f"  {case.name} / {form}: check epoch {c.round.epoch_s:.1f} s, {sum(c.examples):,} examples in "
                  f"{len(c.examples):,} batches", flush=True)
        except Exception:
            errors[form] = traceback.format_exc(limit=3).strip().splitlines()[-1]
            print(f"  ERROR {case.name} / {form}: {errors[form]}", flush=True)
    base = checks.get("one source")
    same = {}
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
        same[form] = "; ".join(problems) or "yes"
        if problems:
            errors[form] = "not the same examples: " + same[form]
            print(f"  ERROR {case.name} / {form}: {errors[form]}", flush=True)
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

    def median(form, field):
        values = [getattr(x, field) for x in timed[form]]
        return None if not values or values[0] is None else statistics.median(values)

    forms = {}
    for form in FORMS:
        c = checks.get(form)
        forms[form] = {
            "config": cfgs[form], "error": errors.get(form), "same_examples": same.get(form),
            "examples": sum(c.examples) if c else None, "batches": len(c.examples) if c else None,
            "frames": sum(c.frames) if c and c.frames and c.frames[0] is not None else None,
            "check_epoch": c.round.__dict__ if c else None,
            "median": {f: median(form, f) for f in ("examples_per_s", "frames_per_s", "cpu_s", "epoch_s",
                                                    "build_ms", "first_ms", "memory_mb")},
            "rounds": [x.__dict__ for x in timed[form]]}
    return {"case": case.name, "batch_size": case.batch_size, "rate": case.rate, "forms": forms}


def _num(v, digits=0):
    return "-" if v is None else f"{v:,.{digits}f}"


def _ratio(a, b):
    return "-" if a is None or b is None else f"{a / b:.2f}x"


def table(results: list[dict]) -> list[str]:
    lines = ["| case | rate | one source | mixed | ratio | per_source | ratio |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for res in results:
        fields = ["examples_per_s"] + (["frames_per_s"] if res["forms"]["one source"]["frames"] else [])
        fields += ["cpu_s"]
        for field in fields:
            one, mixed, per = (res["forms"][f]["median"][field] for f in FORMS)
            unit = {"examples_per_s": "examples/s", "frames_per_s": "frames/s", "cpu_s": "CPU s/epoch"}[field]
            d = 2 if field == "cpu_s" else 0
            lines.append(f"| {res['case']} (batch {res['batch_size']}) | {unit} | {_num(one, d)} | {_num(mixed, d)} | "
                         f"{_ratio(mixed, one)} | {_num(per, d)} | {_ratio(per, one)} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating whole-epoch rounds (default 3)")
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
    print(f"Medians of {args.rounds} alternating whole-epoch rounds; steady rates after the first 10% of batches; "
          "ratio: the mixed form / one source (16 files as one source against two sources of 8 files).")
    for line in table(results):
        print(line)
    for res in results:
        for form in FORMS[1:]:
            f = res["forms"][form]
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
    failed = [(r["case"], k) for r in results for k, v in r["forms"].items() if v["error"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
