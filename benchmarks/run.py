"""Our compiled configs against three fixed yardsticks: the idiomatic rival, the expert reference, the limit.

    python benchmarks/run.py                              # every case (make bench)
    python benchmarks/run.py --cases floats64 continuous75 --rounds 2   # a quick look: no verdict

For each case (``cases()``): our pipeline (``build_input_fn`` on a dict
config, one ``input_fn`` called once per epoch), the expert reference
(hand-written variants, benchmarks/handwritten.py, that must yield identical
batches), the idiomatic rival (benchmarks/idiomatic.py, the same work in
another order), a naive record-by-record pipeline and the limits
(benchmarks/limit.py: read + parse, read only). Every pipeline first runs one
epoch whose batches are hashed, in order and per example; a variant whose
digest differs from ours is an error, the idiomatic and naive pipelines are
compared by the multiset of their examples and their batch sizes
(harness.same_work). Then ours, the idiomatic rival, the limits and the
identical variants whose check epoch was within KEEP of the fastest variant's
run whole epochs alternately (rotating order), ``--rounds`` times, fresh
dataset and iterator each round. The others are shown with the figures of
their check epoch, measured while hashing. The fastest identical variant
(median steady examples/s) is the expert reference. Ours is compared with each
yardstick over paired rounds (benchmarks/verdict.py): per round ours / the
rival (or ours - the rival, in ms), then the median of those with its spread;
the targets are judged on that median, from 7 rounds (the default) on.

Prints the table of every pipeline, then ours against the yardsticks with
MET / MISS per target (``summary``); writes benchmarks/out/results.json
(gitignored). Exits 1 only when a pipeline fails or an output that must be
identical differs; a MISS does not change it.
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
import idiomatic as idm  # noqa: E402
import limit  # noqa: E402
import verdict  # noqa: E402

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
    note: str = ""
    idiomatic: tuple[str, Callable] | None = None  # (label, make(files, batch_size)): same work, any order
    parse: Callable | None = None  # a batch of serialized records -> parsed (the read+parse limit)
    lengths_of: Callable | None = None  # numpy batch -> per example lengths (padded cases; harness.example_digests)
    rate: str = "examples_per_s"  # the steady rate compared with the yardsticks (frames_per_s: windows, speech)

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


def labels_lengths(batch) -> np.ndarray:
    return np.count_nonzero(batch[1]["labels"], axis=1)


def speech_fields(**fields) -> dict:
    """What the speech cases share: frames and lengths from the labels (never 0), the read+parse limit."""
    return {"frames_of": labels_count, "lengths_of": labels_lengths, "parse": hw.parse_speech, **fields}


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
    # The idiomatic rival of the fixed-size cases is batch then parse: the guide's vectorized parse; each record
    # parsed then batched is the naive pipeline (its figures are in the table).
    speech = [("frames", "frames"), ("labels", "labels")]
    naive_speech = ("naive: parse each record, padded_batch", hw.record_by_record(hw.parse_speech, padded=True),
                    True)
    return [
        Case("floats64", "floats", config("independent", ["x"], ["label"], 256, [("x", "x"), ("label", "label")]),
             independent_variants(hw.parse_floats),
             ("naive: parse each record, batch", hw.record_by_record(hw.parse_floats), True),
             idiomatic=("idiomatic: interleave, batch, parse", idm.batch_then_parse(hw.parse_floats)),
             parse=hw.parse_floats),
        Case("raw_floats", "raw_floats",
             config("independent", ["x"], ["label"], 256, [("x", "x"), ("label", "label")]),
             independent_variants(hw.parse_raw_floats),
             ("naive: parse each record, batch", hw.record_by_record(hw.parse_raw_floats), True),
             idiomatic=("idiomatic: interleave, batch, parse", idm.batch_then_parse(hw.parse_raw_floats)),
             parse=hw.parse_raw_floats),
        Case("images", "images",
             config("independent", ["image"], ["label"], 256, [("image", "image"), ("label", "label")]),
             independent_variants(hw.parse_images),
             ("naive: parse each record, batch", hw.record_by_record(hw.parse_images), True),
             idiomatic=("idiomatic: interleave, batch, parse", idm.batch_then_parse(hw.parse_images)),
             parse=hw.parse_images),
        Case("speech_padded", "speech", config("independent", ["frames"], ["labels"], 32, speech, padding=True),
             independent_variants(hw.parse_speech, fixed=False), naive_speech,
             # idiomatic: batch then parse_sequence_example, measured once at 1.8x the examples/s of each record
             # parsed then padded_batch (idiomatic.parse_then_padded_batch), at half its CPU
             **speech_fields(idiomatic=("idiomatic: interleave, batch, parse", idm.batch_then_parse(hw.parse_speech)),
                             rate="frames_per_s")),
        Case("continuous75", "speech",
             config("continuous_sequence", ["frames"], ["labels"], 32, speech, min_window=75, max_window=75),
             {"parallel interleave of per-file windows": hw.continuous(),
              "sequential interleave of per-file windows": hw.continuous(parallel=False),
              "zip 4 equal files' windows (specialised)": hw.continuous(zip_files=True),
              "parallel interleave of per-file windows; rewrites, autotune off": hw.untuned(hw.continuous())},
             ("naive: parse each record, unbatch frames, batch(75); windows alternate one by one",
              hw.naive_continuous(), False),
             **speech_fields(idiomatic=("idiomatic: per file parse, unbatch, batch(75); interleave, batch",
                                        idm.continuous()), rate="frames_per_s")),
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
             **speech_fields(idiomatic=("idiomatic: per file batch(3), parse, concatenate; interleave, padded_batch",
                                        idm.discrete()), rate="frames_per_s")),
        # Folded in from the previous harness: secondary feature + slices + padding value.
        Case("speech_slices", "speech",
             config("independent", ["frames", "n"], ["next"], 32, [("frames", "frames"), ("labels", "next")],
                    secondary_features=[{"to_name": "n", "type": "length", "args": {"tensor": "frames"}}],
                    processing_steps=[{"tensor": "frames", "type": "slice", "args": {"slice": "[:-1]"}},
                                      {"tensor": "next", "type": "slice", "args": {"slice": "[1:]"}}],
                    padding=[{"tensor": "next", "value": -1}]),
             independent_variants(hw.parse_speech_slices, fixed=False),
             # idiomatic: batch, then the vectorized parse and slices, measured once at 1.5-1.7x the examples/s of
             # each record parsed and sliced then padded_batch (idiomatic.speech_slices_one). The rate compared is
             # examples/s (records/s), not frames/s: the limit's frames are whole records', ours' one fewer each.
             idiomatic=("idiomatic: interleave, batch, parse and slice", idm.batch_then_parse(hw.parse_speech_slices)),
             frames_of=lambda b: int(b[0]["n"].sum()), lengths_of=lambda b: b[0]["n"], parse=hw.parse_speech),
        Case("continuous_random", "speech",
             config("continuous_sequence", ["frames"], ["labels"], 32, speech, min_window=50, max_window=100,
                    padding=True, seed=1),
             {}, **speech_fields(rate="frames_per_s"),
             note="ours only: window lengths come from our internal random stream, which hand-written "
                  "tf.data cannot reproduce without copying our implementation"),
    ]


# --- running -------------------------------------------------------------------------------------

@dataclasses.dataclass
class Pipeline:
    name: str
    role: str  # ours | variant (the expert reference) | idiomatic | naive | limit (read + parse) | read (read only)
    make: Callable[[], tf.data.Dataset]
    expect_identical: bool = False  # an error when its batches differ from ours (the expert reference)
    checked: harness.Check | None = None
    identical: bool | None = None  # the same batches in the same order (in-order digest)
    other_work: str | None = None  # what differs from ours' examples or batch sizes (harness.same_work)
    rounds: list = dataclasses.field(default_factory=list)
    error: str | None = None

    def median(self, field: str):
        """Median over the timed rounds; without any, the check epoch's value (measured while hashing)."""
        measured = self.rounds or ([self.checked.round] if self.checked else [])
        values = [getattr(r, field) for r in measured]
        return None if not values or values[0] is None else statistics.median(values)

    def startup_ms(self) -> float | None:
        """Median of build + iterator + first batch over the timed rounds (the check epoch is the first call)."""
        return statistics.median(r.build_ms + r.first_ms for r in self.rounds) if self.rounds else None

    def first_call_ms(self) -> float | None:
        return self.checked.round.build_ms + self.checked.round.first_ms if self.checked else None

    @property
    def same(self) -> str:
        if self.role in ("ours", "limit", "read") or self.checked is None:
            return "-"
        if self.identical:
            return "yes"
        return "same work" if self.other_work is None else "NO"


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
    # One input_fn per case, called once per epoch: the check epoch is its first call, the timed rounds
    # are second and later calls (a process builds its input_fn once and calls it per fit / epoch).
    out = [Pipeline("ours", "ours", build_input_fn(ours_config))]
    block = our_block(ours_config)

    def hand(make, *args):  # the file listing counts as building, as ours lists its directory
        return lambda: make(bench_data.files(directory), case.batch_size, *args)

    out += [Pipeline(name, "variant", hand(make, block), expect_identical=True)
            for name, make in case.variants.items()]
    if case.idiomatic:
        out.append(Pipeline(case.idiomatic[0], "idiomatic", hand(case.idiomatic[1])))
    if case.naive:
        name, make, identical = case.naive
        out.append(Pipeline(name, "naive", hand(make, block) if ours_config["type"] == "independent" else hand(make),
                            expect_identical=identical))
    if case.parse:
        out.append(Pipeline(f"limit: files in turn, batch({limit.BATCH}), parse", "limit",
                            hand(limit.read_parse(case.parse))))
        out.append(Pipeline(f"limit: files in turn, batch({limit.BATCH}), records counted", "read",
                            hand(limit.read_only())))
    return out


def _fail(p: Pipeline, stage: str) -> None:
    p.error = f"{stage}: {traceback.format_exc(limit=3).strip().splitlines()[-1]}"
    print(f"  ERROR {p.name}: {p.error}", flush=True)


def check(case: Case, p: Pipeline, ours: Pipeline) -> None:
    """p's check epoch; then whether it yields ours' batches (in order) or the same work (any order)."""
    if p.role in ("limit", "read"):
        frames_of = labels_count if case.lengths_of else None  # the limit parses whole records
        p.checked = harness.epoch(p.make, frames_of if p.role == "limit" else None, hashing=False)
        return
    p.checked = harness.epoch(p.make, case.frames_of, lengths_of=case.lengths_of)
    if p is ours or ours.checked is None:
        return
    p.identical = p.checked.digest == ours.checked.digest
    p.other_work = None if p.identical else harness.same_work(ours.checked, p.checked)
    if not p.identical and p.expect_identical:
        p.error = "outputs differ from ours (epoch digest)" + (f"; other work: {p.other_work}" if p.other_work else "")
        print(f"  ERROR {p.name}: {p.error}", flush=True)
    elif p.other_work:
        print(f"  {p.name}: same work NO ({p.other_work})", flush=True)


def run_case(case: Case, directory: str, rounds: int) -> list[Pipeline]:
    pipelines = pipelines_of(case, directory)
    ours = pipelines[0]
    for p in pipelines:  # the check epochs
        try:
            check(case, p, ours)
        except Exception:  # noqa: BLE001 -- reported, and the run exits 1
            _fail(p, "check epoch")
    # Ours, the idiomatic rival, the limits and the variants within KEEP of the fastest check epoch run the
    # timed rounds.
    variants = [p for p in pipelines if p.role == "variant" and p.error is None]
    fastest = max((p.checked.round.examples_per_s for p in variants), default=0)
    timed = [p for p in pipelines if p.error is None and p.checked is not None and (
        p.role in ("ours", "idiomatic", "limit", "read")
        or p in variants and p.checked.round.examples_per_s >= KEEP * fastest)]
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


def _role(pipelines: list[Pipeline], role: str) -> Pipeline | None:
    return next((p for p in pipelines if p.role == role and p.error is None and p.rounds), None)


def _series(p: Pipeline, field: str) -> list:
    return [getattr(r, field) for r in p.rounds]


def read_rates(case: Case, read: Pipeline, parsed: Pipeline | None) -> list | None:
    """The read-only limit's rounds in the case's rate: records/s, or frames/s at the data's frames per
    record (counted by the read+parse limit's check epoch)."""
    if case.rate == "examples_per_s":
        return _series(read, "examples_per_s")
    if parsed is None or parsed.checked.frames[0] is None:
        return None
    per_record = sum(parsed.checked.frames) / sum(parsed.checked.examples)
    return [v * per_record for v in _series(read, "examples_per_s")]


def informational(spread: verdict.Spread | None) -> dict:
    """A comparison shown with its spread, without a target."""
    return {"target": None, "verdict": None, "text": verdict.describe(spread),
            "spread": None if spread is None else dataclasses.asdict(spread)}


def compared(case: Case, pipelines: list[Pipeline]) -> dict:
    """Ours against each yardstick over paired rounds (verdict.paired): steady rate against the expert
    reference (target), the idiomatic rival and the limits; CPU s/epoch, start-up (iterator + first
    batch) and the first call against the idiomatic rival (targets)."""
    ours, best, idiom = pipelines[0], strongest(pipelines), _role(pipelines, "idiomatic")
    parsed, read = _role(pipelines, "limit"), _role(pipelines, "read")
    rate, out = _series(ours, case.rate), {}
    if best:
        out["steady vs expert"] = verdict.judged(verdict.paired(rate, _series(best, case.rate)), "steady vs expert")
    if idiom:
        out["steady vs idiomatic"] = informational(verdict.paired(rate, _series(idiom, case.rate)))
    if parsed:
        out["steady of read+parse limit"] = informational(verdict.paired(rate, _series(parsed, case.rate)))
    read_limit = read_rates(case, read, parsed) if read else None
    if read_limit:
        out["steady of read-only limit"] = informational(verdict.paired(rate, read_limit))
    if idiom:
        out["CPU s/epoch vs idiomatic"] = verdict.judged(
            verdict.paired(_series(ours, "cpu_s"), _series(idiom, "cpu_s")), "CPU s/epoch vs idiomatic")
        out["start-up vs idiomatic"] = verdict.judged(
            verdict.paired(_series(ours, "first_ms"), _series(idiom, "first_ms"), "difference"),
            "start-up vs idiomatic")
        # One first call per pipeline: judged once the run has enough rounds for the others.
        out["first call vs idiomatic"] = verdict.judged(
            verdict.paired([ours.first_call_ms()], [idiom.first_call_ms()], "difference"),
            "first call vs idiomatic", rounds=min(len(ours.rounds), len(idiom.rounds)))
    return out


def summary(case: Case, pipelines: list[Pipeline]) -> dict:
    """Ours against the three yardsticks: medians of the timed rounds, and per comparison the median of
    the per-round ratios or differences with its spread and, for the issue's targets, MET / MISS
    (``compared``)."""
    ours, best, idiom = pipelines[0], strongest(pipelines), _role(pipelines, "idiomatic")
    if not ours.rounds:
        return {}
    out = {"rate": case.rate, "ours_rate": ours.median(case.rate), "rounds": len(ours.rounds),
           "expert": best.name if best else None, "idiomatic": idiom.name if idiom else None,
           "idiomatic_same_work": None if idiom is None else ("yes" if idiom.other_work is None else idiom.other_work),
           "cpu_s": ours.median("cpu_s"), "startup_ms": ours.median("first_ms"),
           "first_call_ms": ours.first_call_ms()}
    if idiom:
        out.update(idiomatic_cpu_s=idiom.median("cpu_s"), idiomatic_startup_ms=idiom.median("first_ms"),
                   idiomatic_first_call_ms=idiom.first_call_ms())
    out["compared"] = compared(case, pipelines)
    out["met"] = {name: c["verdict"] for name, c in out["compared"].items() if c["verdict"]}
    return out


# --- reporting -----------------------------------------------------------------------------------

def _num(value, digits=0):
    return "-" if value is None else f"{value:,.{digits}f}"


def _aligned(head: tuple, rows: list, lines: list, left: int = 3) -> list[str]:
    """Columns padded to width (the first ``left`` to the left); ``lines``: (row index, text) under it."""
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]

    def fmt(row):
        return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()

    out = [fmt(head), fmt(tuple("-" * w for w in widths))]
    for i, row in enumerate(rows, start=1):
        out.append(fmt(row))
        out += [" " * (widths[0] + 2) + text for at, text in lines if at == i]
    return out


def table(results: list[dict]) -> list[str]:
    """Every pipeline of every case (medians of its timed rounds, or its check epoch)."""
    head = ("case", "pipeline", "same", "rounds", "build ms", "first ms", "examples/s", "frames/s", "CPU s",
            "mem MB")
    rows, lines = [], []  # lines: (index in rows before which it goes, text spanning the columns)
    for res in results:
        for i, p in enumerate(res["pipelines"]):
            m = p["median"]
            mark = "* " if p["name"] == res["strongest"] else ("i " if p["role"] == "idiomatic" else "  ")
            case = res["case"] if i == 0 else ""
            if p["error"]:
                rows.append((case, mark + p["name"], p["same"], "", "ERROR", "", "", "", "", ""))
                lines.append((len(rows), "    " + p["error"]))
                continue
            rows.append((case, mark + p["name"], p["same"], str(len(p["rounds"])) if p["rounds"] else "check",
                         _num(m.get("build_ms")), _num(m.get("first_ms")), _num(m.get("examples_per_s")),
                         _num(m.get("frames_per_s")), _num(m.get("cpu_s"), 2), _num(m.get("memory_mb"))))
            if p["other_work"] and p["role"] in ("idiomatic", "naive"):
                lines.append((len(rows), f"    same work: NO ({p['other_work']})"))
        if res["note"]:
            lines.append((len(rows), "  " + res["note"]))
    return _aligned(head, rows, lines)


def _medians(s: dict, name: str) -> str:
    """The plain medians beside a comparison against the idiomatic rival."""
    if name == "CPU s/epoch vs idiomatic":
        return f"ours {s['cpu_s']:.2f} s, idiomatic {s['idiomatic_cpu_s']:.2f} s"
    if name == "start-up vs idiomatic":
        return f"ours {s['startup_ms']:.0f} ms, idiomatic {s['idiomatic_startup_ms']:.0f} ms"
    if name == "first call vs idiomatic":
        return f"ours {s['first_call_ms']:.0f} ms, idiomatic {s['idiomatic_first_call_ms']:.0f} ms"
    return ""


def summary_table(results: list[dict]) -> list[str]:
    """Ours against the yardsticks, one row per comparison: the median of the paired rounds with its
    spread, the target and MET / MISS (or no verdict)."""
    head = ("case", "ours against", "median (lowest-highest, IQR)", "target", "verdict", "medians")
    rows, lines = [], []
    for res in results:
        s = res["summary"]
        if not s:
            continue
        first = (f"{res['case']}", f"ours {_num(s['ours_rate'])} {s['rate'].replace('_per_s', '/s')}, "
                 f"{s['rounds']} rounds", "", "", "", "")
        rows.append(first)
        for name, c in s["compared"].items():
            rows.append(("", name, c["text"], c["target"] or "", c["verdict"] or "", _medians(s, name)))
        notes = [f"expert: {s['expert']}" if s["expert"] else "no expert reference",
                 s["idiomatic"] or "no idiomatic rival"]  # its name starts "idiomatic:"
        if "first call vs idiomatic" in s["compared"]:
            notes.append("first call: one measurement (the process's first input_fn())" if s.get("first_call_of_process")
                         else "first call: one measurement (this case's first input_fn(), not the process's)")
        if s["idiomatic_same_work"] not in (None, "yes"):
            notes.append(f"idiomatic same work: NO ({s['idiomatic_same_work']})")
        elif s["idiomatic_same_work"] == "yes":
            notes.append("idiomatic same work: yes")
        lines.append((len(rows), "; ".join(notes)))
    return _aligned(head, rows, lines, left=6)


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
    fields = [f.name for f in dataclasses.fields(harness.Round)]
    return {
        "case": case.name, "data": case.data, "batch_size": case.batch_size, "config": case.config,
        "note": case.note, "strongest": best.name if best else None, "summary": summary(case, pipelines),
        "pipelines": [{
            "name": p.name, "role": p.role, "expect_identical": p.expect_identical, "identical": p.identical,
            "same": p.same, "other_work": p.other_work, "error": p.error,
            "digest": p.checked.digest or None if p.checked else None,
            "multiset": p.checked.multiset if p.checked else None,
            "batches": len(p.checked.examples) if p.checked else None,
            "examples": sum(p.checked.examples) if p.checked else None,
            "frames": sum(p.checked.frames) if p.checked and p.checked.frames[0] is not None else None,
            "startup_ms": p.startup_ms(), "first_call_ms": p.first_call_ms(),
            "check_epoch": dataclasses.asdict(p.checked.round) if p.checked else None,
            "median": {f: p.median(f) for f in fields if f != "hashed"} if p.checked else {},
            "rounds": [dataclasses.asdict(r) for r in p.rounds]} for p in pipelines],
    }


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def report(results: list[dict], rounds: int) -> None:
    print(f"Medians of up to {rounds} alternating whole-epoch rounds (rounds 'check': the check epoch, measured "
          "while hashing). same: yes = the epoch's batches hash equal to ours, in order; same work = the same "
          "examples (multiset of per-example digests) in batches of the same sizes, in another order. build: "
          "dataset construction (ours: input_fn()); first: iterator + first batch; examples/s, frames/s: steady, "
          "after the first 10% of batches; CPU s: user+sys per epoch; mem MB: peak RSS growth over the epoch. "
          "*: the expert reference (the fastest identical hand-written pipeline); i: the idiomatic rival.")
    for line in table(results):
        print(line)
    print()
    print(f"Ours against the yardsticks over paired rounds: per round (both pipelines timed in the same round) "
          f"ours / the rival's steady rate or CPU s, ours - the rival's ms; the median of those per-round values, "
          f"with the lowest-highest and the interquartile range. Targets, on the median: steady >= 1.00x the expert "
          f"reference; CPU s/epoch <= 1.00x the idiomatic rival's; start-up (iterator + first batch of a later "
          f"call) <= idiomatic + 50 ms; first call (the case's first input_fn() call, with its tracing, + iterator "
          f"+ first batch; the process's first for the first case) <= the idiomatic's first build + first batch "
          f"+ 100 ms. A verdict needs >= {verdict.MIN_ROUNDS} paired rounds.")
    for line in summary_table(results):
        print(line)


def main(argv=None) -> int:
    all_cases = cases()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=verdict.MIN_ROUNDS,
                        help=f"alternating whole-epoch rounds (default {verdict.MIN_ROUNDS}; fewer: no verdict)")
    parser.add_argument("--cases", nargs="*", choices=[c.name for c in all_cases], metavar="CASE",
                        help="run only these cases: " + ", ".join(c.name for c in all_cases))
    parser.add_argument("--output", default=OUT, help="JSON results (default benchmarks/out/results.json)")
    args = parser.parse_args(argv)

    started, load_start = time.perf_counter(), os.getloadavg()
    info = machine()
    print(f"machine: {info['usable_cpus']} usable of {info['cpus']} CPUs ({info['cpu']}); TensorFlow "
          f"{info['tensorflow']}; Python {info['python']}; load average {_load()} (1, 5, 15 min)", flush=True)
    directories = bench_data.generate(log=lambda m: print(m, flush=True))
    results = []
    for case in all_cases:
        if args.cases and case.name not in args.cases:
            continue
        print(f"running {case.name} (load average {_load()}) ...", flush=True)
        load = os.getloadavg()
        results.append(result(case, run_case(case, directories[case.data], args.rounds)))
        results[-1]["load_average"] = {"start": load, "end": os.getloadavg()}
        if results[-1]["summary"]:  # what one-off work per process its first call paid (summary_table)
            results[-1]["summary"]["first_call_of_process"] = len(results) == 1
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print()
    report(results, args.rounds)
    print(f"load average at start {' '.join(f'{v:.2f}' for v in load_start)}, at end {_load()} (1, 5, 15 min); "
          f"peak RSS of the run: {peak_mb:.0f} MB; total time {time.perf_counter() - started:.0f} s")
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump({"machine": info, "rounds": args.rounds, "peak_memory_mb": round(peak_mb, 1),
                   "load_average": {"start": load_start, "end": os.getloadavg()}, "results": results},
                  f, indent=1, default=str)
        f.write("\n")
    print(f"results written to {os.path.relpath(args.output)}")
    failed = [p["name"] for r in results for p in r["pipelines"] if p["error"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
