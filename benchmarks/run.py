"""Our compiled configs against the strongest hand-written tf.data yielding identical batches.

    python benchmarks/run.py                              # every case (make bench)
    python benchmarks/run.py --cases floats64 continuous75 --rounds 3

For each case (``cases()``): our pipeline (``build_input_fn`` on a dict
config), hand-written variants (benchmarks/handwritten.py) and a naive
record-by-record pipeline. Every pipeline first runs one epoch whose batches
are hashed; a variant whose digest differs from ours is an error. Then ours
and the identical variants whose check epoch was within KEEP of the fastest
variant's run whole epochs alternately (rotating order), ``--rounds`` times,
fresh dataset and iterator each round. The others (and the naive pipeline)
are shown with the figures of their check epoch, measured while hashing.
The fastest identical variant (median steady examples/s) is "the
strongest"; targets compare ours with it and are informational.

Prints one table; writes benchmarks/out/results.json (gitignored). Exits 1
only when a pipeline fails or an output that must be identical differs.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import resource
import statistics
import sys
import time
import traceback
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository, when the package is not installed
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import bench_data  # noqa: E402
import handwritten as hw  # noqa: E402
import harness  # noqa: E402

from batchloaders import build_input_fn  # noqa: E402

OUT = os.path.join(HERE, "out", "results.json")
KEEP = 0.8  # variants slower than this fraction of the fastest (check epochs) are not timed further


# --- cases ---------------------------------------------------------------------------------------

@dataclasses.dataclass
class Case:
    name: str
    data: str  # dataset in benchmarks/data
    config: dict  # our loader config; the data_dir is filled in
    variants: dict[str, Callable]  # must be identical: label -> make(files, batch_size[, our block size])
    naive: tuple[str, Callable, bool] | None = None  # (label, make, expected identical)
    frames_of: Callable | None = None  # numpy batch -> frames in it
    steady_target: float = 1.0  # ours / strongest, examples/s
    note: str = ""

    @property
    def batch_size(self) -> int:
        return self.config["args"]["target_batch_size"]


def config(loader: str, inputs, targets, batch_size: int, primary, **args) -> dict:
    """What a performance-minded user writes: 4 files read at once, 2 parallel parses, 4 batches
    prefetched, 1 MiB read buffers; one epoch, unshuffled (deterministic output)."""
    base = {"dataset": {"type": "dir", "args": {"data_dir": None}}, "target_batch_size": batch_size,
            "drop_remainder": False, "epochs": 1, "shuffle": False, "num_parallel_reads": hw.READS,
            "num_parallel_parses": hw.PARSES, "num_prefetch": hw.PREFETCH, "num_read_buffer_bytes": hw.READ_BUFFER,
            "primary_features": [{"from_name": f, "to_name": t} for f, t in primary]}
    base.update(args)
    return {"type": loader, "model": {"inputs": list(inputs), "targets": list(targets)}, "args": base}


def labels_count(batch) -> int:
    return int(np.count_nonzero(batch[1]["labels"]))  # labels are 1..48; padding is 0


def independent_variants(parse, fixed: bool = True) -> dict:
    out = {"parallel interleave of blocks, rebatch, parse": hw.blocks_then_parse(parse, parallel=True),
           "sequential interleave of blocks, rebatch, parse": hw.blocks_then_parse(parse),
           "sequential interleave of blocks read ahead, rebatch, parse": hw.blocks_then_parse(parse, ahead=True),
           "interleave records (block_length), batch, parse": hw.records_then_parse(parse)}
    if fixed:  # parsed records of a block differ in padding when features vary in length
        out["parse blocks in the interleave, rebatch"] = hw.parse_blocks(parse)
        out["parse blocks in the interleave, rebatch; rewrites, autotune off"] = hw.untuned(hw.parse_blocks(parse))
        out["parse blocks in the interleave in an inline map, rebatch; rewrites, autotune off"] = hw.untuned(
            hw.parse_blocks_inline(parse))
    else:
        out["sequential interleave of blocks read ahead, rebatch, parse; rewrites, autotune off"] = hw.untuned(
            hw.blocks_then_parse(parse, ahead=True))
    return out


def cases() -> list[Case]:
    speech = [("frames", "frames"), ("labels", "labels")]
    naive_speech = ("naive: parse each record, padded_batch", hw.record_by_record(hw.parse_speech, padded=True),
                    True)
    return [
        Case("floats64", "floats", config("independent", ["x"], ["label"], 256, [("x", "x"), ("label", "label")]),
             independent_variants(hw.parse_floats),
             ("naive: parse each record, batch", hw.record_by_record(hw.parse_floats), True)),
        Case("raw_floats", "raw_floats",
             config("independent", ["x"], ["label"], 256, [("x", "x"), ("label", "label")]),
             independent_variants(hw.parse_raw_floats),
             ("naive: parse each record, batch", hw.record_by_record(hw.parse_raw_floats), True)),
        Case("images", "images",
             config("independent", ["image"], ["label"], 256, [("image", "image"), ("label", "label")]),
             independent_variants(hw.parse_images),
             ("naive: parse each record, batch", hw.record_by_record(hw.parse_images), True)),
        Case("speech_padded", "speech", config("independent", ["frames"], ["labels"], 32, speech, padding=True),
             independent_variants(hw.parse_speech, fixed=False), naive_speech, labels_count),
        Case("continuous75", "speech",
             config("continuous_sequence", ["frames"], ["labels"], 32, speech, min_window=75, max_window=75),
             {"parallel interleave of per-file windows": hw.continuous(),
              "sequential interleave of per-file windows": hw.continuous(parallel=False),
              "zip 4 equal files' windows (specialised)": hw.continuous(zip_files=True),
              "parallel interleave of per-file windows; rewrites, autotune off": hw.untuned(hw.continuous())},
             ("naive: parse each record, unbatch frames, batch(75); windows alternate one by one",
              hw.naive_continuous(), False),
             labels_count, steady_target=1.2),
        Case("discrete3", "speech",
             config("discrete_sequence", ["frames"], ["labels"], 32, speech, min_window=3, max_window=3,
                    padding=True),
             {"parallel interleave of planned windows, batch, parse": hw.discrete(),
              "sequential interleave of planned windows, batch, parse": hw.discrete(parallel=False),
              "zip 4 equal files' windows, batch, parse (specialised)": hw.discrete(zip_files=True),
              "parallel interleave of planned windows, batch, parse; rewrites, autotune off":
                  hw.untuned(hw.discrete())},
             ("naive: parse each record, ragged_batch(3); windows alternate one by one", hw.naive_discrete(),
              False),
             labels_count),
        # Folded in from the previous harness: secondary feature + slices + padding value.
        Case("speech_slices", "speech",
             config("independent", ["frames", "n"], ["next"], 32, [("frames", "frames"), ("labels", "next")],
                    secondary_features=[{"to_name": "n", "type": "length", "args": {"tensor": "frames"}}],
                    processing_steps=[{"tensor": "frames", "type": "slice", "args": {"slice": "[:-1]"}},
                                      {"tensor": "next", "type": "slice", "args": {"slice": "[1:]"}}],
                    padding=[{"tensor": "next", "value": -1}]),
             independent_variants(hw.parse_speech_slices, fixed=False),
             frames_of=lambda b: int(b[0]["n"].sum())),
        Case("continuous_random", "speech",
             config("continuous_sequence", ["frames"], ["labels"], 32, speech, min_window=50, max_window=100,
                    padding=True, seed=1),
             {}, frames_of=labels_count,
             note="ours only: window lengths come from our internal random stream, which hand-written "
                  "tf.data cannot reproduce without copying our implementation"),
    ]


# --- running -------------------------------------------------------------------------------------

@dataclasses.dataclass
class Pipeline:
    name: str
    role: str  # ours | variant | naive
    make: Callable[[], tf.data.Dataset]
    expect_identical: bool = True
    checked: harness.Check | None = None
    identical: bool | None = None
    rounds: list = dataclasses.field(default_factory=list)
    error: str | None = None

    def median(self, field: str):
        """Median over the timed rounds; without any, the check epoch's value (measured while hashing)."""
        measured = self.rounds or ([self.checked.round] if self.checked else [])
        values = [getattr(r, field) for r in measured]
        return None if not values or values[0] is None else statistics.median(values)


def with_data(config_: dict, directory: str) -> dict:
    out = json.loads(json.dumps(config_))
    out["args"]["dataset"]["args"]["data_dir"] = directory
    return out


def our_block(config_: dict) -> int:
    """Records per block of our loaders. It sets the order in which files alternate (README:
    "How files alternate"), so the hand-written pipelines are given it (handwritten.py)."""
    from batchloaders import load_config
    from batchloaders.read import sources
    from batchloaders.loaders import continuous_sequence, discrete_sequence

    checked = load_config(config_)
    if checked.type == "continuous_sequence":
        return continuous_sequence.records_per_block(checked, checked.selected)
    if checked.type == "discrete_sequence":
        return discrete_sequence.records_per_block(checked)
    return sources.records_per_block(checked)


def pipelines_of(case: Case, directory: str) -> list[Pipeline]:
    ours_config = with_data(case.config, directory)
    out = [Pipeline("ours", "ours", lambda: build_input_fn(ours_config)())]
    block = our_block(ours_config)

    def hand(make, *args):  # the file listing counts as building, as ours lists its directory
        return lambda: make(bench_data.files(directory), case.batch_size, *args)

    out += [Pipeline(name, "variant", hand(make, block)) for name, make in case.variants.items()]
    if case.naive:
        name, make, identical = case.naive
        out.append(Pipeline(name, "naive", hand(make, block) if ours_config["type"] == "independent" else hand(make),
                            expect_identical=identical))
    return out


def _fail(p: Pipeline, stage: str) -> None:
    p.error = f"{stage}: {traceback.format_exc(limit=3).strip().splitlines()[-1]}"
    print(f"  ERROR {p.name}: {p.error}", flush=True)


def run_case(case: Case, directory: str, rounds: int) -> list[Pipeline]:
    pipelines = pipelines_of(case, directory)
    ours = pipelines[0]
    for p in pipelines:  # the check epochs
        try:
            p.checked = harness.epoch(p.make, case.frames_of)
        except Exception:  # noqa: BLE001 -- reported, and the run exits 1
            _fail(p, "check epoch")
            continue
        if p is not ours and ours.checked is not None:
            p.identical = p.checked.digest == ours.checked.digest
            if not p.identical and p.expect_identical:
                p.error = "outputs differ from ours (epoch digest)"
                print(f"  ERROR {p.name}: {p.error}", flush=True)
    # Ours and the variants within KEEP of the fastest check epoch run the timed rounds.
    variants = [p for p in pipelines if p.role == "variant" and p.error is None]
    fastest = max((p.checked.round.examples_per_s for p in variants), default=0)
    timed = [p for p in pipelines if p.error is None and p.checked is not None and (
        p.role == "ours" or p in variants and p.checked.round.examples_per_s >= KEEP * fastest)]
    for r in range(rounds if timed else 0):
        for p in timed[r % len(timed):] + timed[:r % len(timed)]:  # rotate who goes first
            try:
                p.rounds.append(harness.epoch(p.make, checked=p.checked))
            except Exception:  # noqa: BLE001
                _fail(p, f"round {r + 1}")
        timed = [p for p in timed if p.error is None]
        if not timed:
            break
    return pipelines


def strongest(pipelines: list[Pipeline]) -> Pipeline | None:
    candidates = [p for p in pipelines if p.role == "variant" and p.identical and p.error is None and p.rounds]
    return max(candidates, key=lambda p: p.median("examples_per_s"), default=None)


def targets(case: Case, ours: Pipeline, best: Pipeline) -> list[dict]:
    """The informational targets, ours against the strongest hand-written pipeline (medians)."""
    o, t = (lambda f: ours.median(f)), (lambda f: best.median(f))
    bf_ours, bf_theirs = o("build_ms") + o("first_ms"), t("build_ms") + t("first_ms")
    bf_limit = max(2 * bf_theirs, bf_theirs + 100)
    steady = o("examples_per_s") / t("examples_per_s")
    return [
        {"measure": "steady throughput", "value": f"{steady:.2f}x", "target": f">= {case.steady_target:g}x",
         "pass": steady >= case.steady_target, "ratio": steady},
        {"measure": "CPU s/epoch", "value": f"{o('cpu_s') / t('cpu_s'):.2f}x", "target": "<= 1x",
         "pass": o("cpu_s") <= t("cpu_s"), "ratio": o("cpu_s") / t("cpu_s")},
        {"measure": "build + first batch", "value": f"{bf_ours:.0f} vs {bf_theirs:.0f} ms",
         "target": f"<= {bf_limit:.0f} ms", "pass": bf_ours <= bf_limit, "ratio": bf_ours / bf_theirs},
        {"measure": "memory growth", "value": f"{o('memory_mb'):.0f} vs {t('memory_mb'):.0f} MB",
         "target": f"<= {2 * t('memory_mb'):.0f} MB", "pass": o("memory_mb") <= 2 * t("memory_mb"),
         "ratio": o("memory_mb") / t("memory_mb") if t("memory_mb") > 0 else None},
    ]


# --- reporting -----------------------------------------------------------------------------------

def _num(value, digits=0):
    return "-" if value is None else f"{value:,.{digits}f}"


def table(results: list[dict]) -> list[str]:
    head = ("case", "pipeline", "same", "rounds", "build ms", "first ms", "examples/s", "frames/s", "CPU s",
            "mem MB")
    rows, lines = [], []  # lines: (index in rows before which it goes, text spanning the columns)
    for res in results:
        for i, p in enumerate(res["pipelines"]):
            m = p["median"]
            same = "-" if p["identical"] is None else ("yes" if p["identical"] else "NO")
            name = ("* " if p["name"] == res["strongest"] else "  ") + p["name"]
            case = res["case"] if i == 0 else ""
            if p["error"]:
                rows.append((case, name, same, "", "ERROR", "", "", "", "", ""))
                lines.append((len(rows), "    " + p["error"]))
                continue
            rows.append((case, name, same, str(len(p["rounds"])) if p["rounds"] else "check", _num(m.get("build_ms")), _num(m.get("first_ms")),
                         _num(m.get("examples_per_s")), _num(m.get("frames_per_s")), _num(m.get("cpu_s"), 2),
                         _num(m.get("memory_mb"))))
        if res["targets"]:
            lines.append((len(rows), "  ours vs *: " + "; ".join(
                f"{t['measure']} {t['value']} ({t['target']}: {'pass' if t['pass'] else 'MISS'})"
                for t in res["targets"])))
        elif res["note"]:
            lines.append((len(rows), "  " + res["note"]))
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]

    def fmt(row):
        return "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

    out = [fmt(head), fmt(tuple("-" * w for w in widths))]
    for i, row in enumerate(rows, start=1):
        out.append(fmt(row))
        out += [" " * (widths[0] + 2) + text for at, text in lines if at == i]
    return out


def machine() -> dict:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpus": os.cpu_count(), "usable_cpus": usable, "cpu": model, "python": platform.python_version(),
            "tensorflow": tf.__version__, "platform": platform.platform()}


def result(case: Case, pipelines: list[Pipeline]) -> dict:
    best = strongest(pipelines)
    ours = pipelines[0]
    fields = [f.name for f in dataclasses.fields(harness.Round)]
    return {
        "case": case.name, "data": case.data, "batch_size": case.batch_size, "config": case.config,
        "note": case.note, "strongest": best.name if best else None,
        "targets": targets(case, ours, best) if best and ours.rounds else [],
        "pipelines": [{
            "name": p.name, "role": p.role, "expect_identical": p.expect_identical, "identical": p.identical,
            "error": p.error, "digest": p.checked.digest if p.checked else None,
            "batches": len(p.checked.examples) if p.checked else None,
            "examples": sum(p.checked.examples) if p.checked else None,
            "frames": sum(p.checked.frames) if p.checked and p.checked.frames[0] is not None else None,
            "check_epoch": dataclasses.asdict(p.checked.round) if p.checked else None,
            "median": {f: p.median(f) for f in fields if f != "hashed"} if p.checked else {},
            "rounds": [dataclasses.asdict(r) for r in p.rounds]} for p in pipelines],
    }


def main(argv=None) -> int:
    all_cases = cases()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating whole-epoch rounds (default 5)")
    parser.add_argument("--cases", nargs="*", choices=[c.name for c in all_cases], metavar="CASE",
                        help="run only these cases: " + ", ".join(c.name for c in all_cases))
    parser.add_argument("--output", default=OUT, help="JSON results (default benchmarks/out/results.json)")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    info = machine()
    print(f"machine: {info['usable_cpus']} usable of {info['cpus']} CPUs ({info['cpu']}); TensorFlow "
          f"{info['tensorflow']}; Python {info['python']}", flush=True)
    directories = bench_data.generate(log=lambda m: print(m, flush=True))
    results = []
    for case in all_cases:
        if args.cases and case.name not in args.cases:
            continue
        print(f"running {case.name} ...", flush=True)
        results.append(result(case, run_case(case, directories[case.data], args.rounds)))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print()
    print(f"Medians of up to {args.rounds} alternating whole-epoch rounds (rounds 'check': the check epoch, "
          "measured while hashing). same: the epoch's batches hash equal to ours. build: dataset construction; first: iterator + first batch; examples/s, "
          "frames/s: steady, after the first 10% of batches; CPU s: user+sys per epoch; mem MB: peak RSS growth "
          "over the epoch. *: the strongest hand-written pipeline (fastest identical).")
    for line in table(results):
        print(line)
    print(f"peak RSS of the run: {peak_mb:.0f} MB; total time {time.perf_counter() - started:.0f} s")
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump({"machine": info, "rounds": args.rounds, "peak_memory_mb": round(peak_mb, 1),
                   "results": results}, f, indent=1, default=str)
        f.write("\n")
    print(f"results written to {os.path.relpath(args.output)}")
    failed = [p["name"] for r in results for p in r["pipelines"] if p["error"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
