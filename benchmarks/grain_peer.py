"""Peers outside tf.data: the benchmark records read with grain, against ours (informational).

    python benchmarks/grain_peer.py                                   # floats64, images, speech_padded
    python benchmarks/grain_peer.py --peers tfrecord --cases speech_padded --rounds 1 --data benchmarks/data
    GRAIN_SITE=/path/to/site-packages python benchmarks/grain_peer.py # grain installed with pip --target

grain (>= 0.2.18, for ``grain.experimental.TFRecordIterDataset``) and array-record are not dependencies of
batchloaders (``pip install grain array-record``); without them this script says so and exits 0. Two
grain peers (``--peers``, both by default):

* ``arrayrecord``: the TFRecord files of benchmarks/data (bench_data.py) converted once, record for
  record, into ``<data>/arrayrecord/<dataset>/`` (``group_size:1``, uncompressed, as grain asks for random
  access; the conversion is timed), read with ``MapDataset.source(ArrayRecordDataSource(files))
  .map(parse).batch(n)``, then either threads (``to_iter_dataset(ReadOptions(2 threads, 4 batches))``, as
  ours reads 4 files with 2 parses and 4 batches prefetched) or processes (``mp_prefetch`` with 2 workers:
  the parse holds the GIL);
* ``tfrecord``: the TFRecord files as they are, one ``grain.experimental.TFRecordIterDataset`` per file,
  4 files interleaved (``InterleaveIterDataset(cycle_length=4)``), ``.map(parse).batch(n)``, then
  either 2 threads (``grain.experimental.multithread_prefetch``) or 2 processes (``mp_prefetch``), each
  thread or process given its slice of the files (8 of the 16).

Both peers use the same ``parse`` (``Parser``): records stay ``tf.train.Example`` / ``SequenceExample``
protos, parsed one by one with the protobuf runtime (the message classes are built from TensorFlow's own
descriptors, so grain's workers never import TensorFlow) into NumPy, as a JAX user with existing
tf.Example data writes; speech batches are padded to their longest example with zeros by the batch
function. Ours: ``build_input_fn(config)()`` with the config of benchmarks/run.py's case,
``.as_numpy_iterator()``. Every side yields NumPy batches of the same structure,
``({input: array}, {target: array})``.

Per peer both grain settings run the first quarter of an epoch and the faster is kept. Ours and the peers
then run a check epoch: every example is hashed (padding removed) and the multisets of digests and the
batch sizes must be equal (the order differs). Then they run ``--rounds`` rounds of one whole epoch each,
the order rotating, fresh iterator each; the table shows medians and, per peer, the median of the
per-round ratios of batches/s to ours with its spread (benchmarks/verdict.py). Steady rates skip the
first 10% of the batches; CPU seconds are getrusage of this process plus grain's worker processes from the
iterator's creation to the end of the epoch; memory is this process's peak resident set growth (as
harness.py) plus the peak resident set of each worker process. Writes benchmarks/out/grain_peer.json.
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import resource
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out", "grain_peer.json")
CASES = ("floats64", "images", "speech_padded")
THREADS, PREFETCH, WORKERS, CYCLE = 2, 4, 2, 4  # grain's settings: 2 cores, as ours (2 parses, 4 batches ahead)
WARMUP_FRACTION = 0.1  # as harness.py
PEERS = ("arrayrecord", "tfrecord")
WRITER_OPTIONS = "group_size:1,uncompressed"  # grain warns about any other group size
if os.environ.get("GRAIN_SITE"):
    sys.path.append(os.environ["GRAIN_SITE"])  # spawned grain workers inherit sys.path


# --- parsing tf.train protos into NumPy, without TensorFlow (runs in grain's workers) -----------------

class Parser:
    """record bytes -> ({input: array}, {target: array}) for one case. Pickled into grain's worker
    processes as the serialized descriptors of example.proto / feature.proto; the message classes are
    built on first use with protobuf alone."""

    def __init__(self, kind: str, descriptors: list[bytes]):
        self.kind, self.descriptors, self._classes = kind, descriptors, None

    def __getstate__(self):
        return {"kind": self.kind, "descriptors": self.descriptors, "_classes": None}

    def classes(self):
        if self._classes is None:
            from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
            pool = descriptor_pool.DescriptorPool()
            for serialized in self.descriptors:
                pool.Add(descriptor_pb2.FileDescriptorProto.FromString(serialized))
            self._classes = [message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tensorflow.{name}"))
                             for name in ("Example", "SequenceExample")]
        return self._classes

    def __call__(self, record: bytes):
        example, sequence_example = self.classes()
        if self.kind == "speech":
            lists = sequence_example.FromString(record).feature_lists.feature_list
            frames = np.array([f.float_list.value for f in lists["frames"].feature], np.float32)
            labels = np.array([f.int64_list.value[0] for f in lists["labels"].feature], np.int64)
            return {"frames": frames}, {"labels": labels}
        features = example.FromString(record).features.feature
        label = np.int64(features["label"].int64_list.value[0])
        if self.kind == "images":
            image = np.frombuffer(features["image"].bytes_list.value[0], np.uint8).reshape(32, 32, 3)
            return {"image": image}, {"label": label}
        return {"x": np.array(features["x"].float_list.value, np.float32)}, {"label": label}


def pad_batch(items):
    """Speech examples -> one batch padded with zeros to its longest example."""
    longest = max(len(inputs["frames"]) for inputs, _ in items)
    frames = np.zeros((len(items), longest, items[0][0]["frames"].shape[1]), np.float32)
    labels = np.zeros((len(items), longest), np.int64)
    for i, (inputs, targets) in enumerate(items):
        frames[i, :len(inputs["frames"])] = inputs["frames"]
        labels[i, :len(targets["labels"])] = targets["labels"]
    return {"frames": frames}, {"labels": labels}


def proto_descriptors() -> list[bytes]:
    """feature.proto and example.proto as serialized FileDescriptorProtos, from TensorFlow's classes."""
    from google.protobuf import descriptor_pb2
    from tensorflow.core.example import example_pb2, feature_pb2
    out = []
    for module in (feature_pb2, example_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        out.append(proto.SerializeToString())
    return out


# --- the data: TFRecord -> ArrayRecord, once ----------------------------------------------------------

def converted(directory: str, data: str) -> tuple[list[str], dict]:
    """The ArrayRecord copy of ``<directory>/<data>``'s TFRecord files, written when missing; returns its
    files and the conversion's record (seconds, bytes), kept in ``conversion.json`` beside them."""
    import bench_data
    import tensorflow as tf
    from array_record.python.array_record_module import ArrayRecordWriter

    target = os.path.join(directory, "arrayrecord", data)
    stamp = os.path.join(target, "conversion.json")
    sources = bench_data.files(os.path.join(directory, data))
    names = [os.path.basename(s).replace(".tfrecords", ".array_record") for s in sources]
    if os.path.exists(stamp):
        with open(stamp) as f:
            record = json.load(f)
        if record.get("version") == bench_data.VERSION and record.get("files") == names:
            return [os.path.join(target, n) for n in names], record
    os.makedirs(target, exist_ok=True)
    start, cpu, records = time.perf_counter(), _cpu_seconds(), 0
    for source, name in zip(sources, names):
        writer = ArrayRecordWriter(os.path.join(target, name + ".part"), WRITER_OPTIONS)
        for serialized in tf.data.TFRecordDataset(source).as_numpy_iterator():
            writer.write(serialized)
            records += 1
        writer.close()
        os.replace(os.path.join(target, name + ".part"), os.path.join(target, name))
    record = {"version": bench_data.VERSION, "files": names, "records": records,
              "seconds": time.perf_counter() - start, "cpu_s": _cpu_seconds() - cpu,
              "tfrecord_bytes": sum(os.path.getsize(s) for s in sources),
              "arrayrecord_bytes": sum(os.path.getsize(os.path.join(target, n)) for n in names)}
    with open(stamp, "w") as f:
        json.dump(record, f, indent=1)
    return [os.path.join(target, n) for n in names], record


# --- measuring ----------------------------------------------------------------------------------------

def _cpu_seconds(who=resource.RUSAGE_SELF) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _workers() -> dict[int, tuple[float, int]]:
    """This process's live multiprocessing workers: pid -> (CPU seconds, peak resident set kB)."""
    out, tick = {}, os.sysconf("SC_CLK_TCK")
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            continue
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"spawn_main" not in f.read():  # not multiprocessing's resource tracker
                        continue
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{pid}/status") as f:
                    hwm = next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), 0)
            except (OSError, StopIteration):
                continue
            out[pid] = ((int(fields[11]) + int(fields[12])) / tick, hwm)
    return out


def example_digests(batch, trim: bool) -> list[bytes]:
    """One digest per example of a NumPy batch; ``trim``: cut the padding off (labels are never 0)."""
    arrays = [(key, array) for part in batch for key, array in sorted(part.items())]
    lengths = np.count_nonzero(batch[1]["labels"], axis=1) if trim else None
    out = []
    for i in range(len(arrays[0][1])):
        digest = hashlib.sha1()
        for key, array in arrays:
            row = array[i, :lengths[i]] if trim else array[i]
            digest.update(f"{key}{row.dtype.str}{row.shape}".encode())
            digest.update(np.ascontiguousarray(row).tobytes())
        out.append(digest.digest())
    return out


def epoch(make, iterate, speech: bool, check: bool = False, limit: int | None = None) -> dict:
    """One epoch (or its first ``limit`` batches): ``make()`` builds the pipeline, ``iterate(built)`` gives
    its NumPy iterator. With ``check``, every example is hashed (``digest``: of the sorted digests) and the
    batch sizes are kept (``sizes``)."""
    import harness  # deferred: imports TensorFlow, which grain's spawned workers must not
    gc.collect()
    if harness._trim is not None:
        harness._trim(0)
    start = time.perf_counter()
    built = make()
    made = time.perf_counter()
    harness._reset_peak()
    rss_before, cpu_before = harness._status_kb("VmRSS"), _cpu_seconds()
    reaped_before = _cpu_seconds(resource.RUSAGE_CHILDREN)
    opened = time.perf_counter()
    iterator = iterate(built)
    times, sizes, frames, digests, workers = [], [], [], [], {}
    for batch in iterator:
        times.append(time.perf_counter())
        sizes.append(len(batch[1][next(iter(batch[1]))]))
        frames.append(int(np.count_nonzero(batch[1]["labels"])) if speech else 0)
        if check:
            digests += example_digests(batch, speech)
        if len(times) % 50 == 1:
            workers.update(_workers())
        if limit and len(times) >= limit:
            break
    workers.update(_workers())
    cpu, peak = _cpu_seconds() - cpu_before, harness._status_kb("VmHWM")
    getattr(iterator, "close", lambda: None)()
    del iterator, built
    gc.collect()
    reaped = _cpu_seconds(resource.RUSAGE_CHILDREN) - reaped_before  # workers that ended and were waited for
    out = rates(times, sizes, frames if speech else None)
    out.update(build_ms=(made - start) * 1000, first_ms=(times[0] - opened) * 1000, epoch_s=times[-1] - opened,
               cpu_s=cpu + max(reaped, sum(c for c, _ in workers.values())), memory_mb=(peak - rss_before) / 1024,
               workers=len(workers), workers_memory_mb=sum(h for _, h in workers.values()) / 1024)
    if check:
        out.update(sizes=sizes, digest=hashlib.sha256(b"".join(sorted(digests))).hexdigest())
    return out


def rates(times: list[float], sizes: list[int], frames: list[int] | None) -> dict:
    """Steady rates: after the first WARMUP_FRACTION of the batches, to the last."""
    skip = min(max(1, int(len(times) * WARMUP_FRACTION)), len(times) - 1)
    span = times[-1] - times[skip - 1]
    return {"batches": len(times), "batches_per_s": (len(times) - skip) / span,
            "examples_per_s": sum(sizes[skip:]) / span,
            "frames_per_s": None if frames is None else sum(frames[skip:]) / span}


def read_cost(files: list[str], count: int = 2000) -> dict:
    """What array_record charges per record: one record per read call (as grain's source reads) against
    the same records in one call, in microseconds."""
    from array_record.python.array_record_module import ArrayRecordReader
    reader = ArrayRecordReader(files[0], "readahead_buffer_size:0")
    count = min(count, reader.num_records())
    start = time.perf_counter()
    for i in range(count):
        reader.read([i])
    single = time.perf_counter() - start
    start = time.perf_counter()
    reader.read(list(range(count)))
    bulk = time.perf_counter() - start
    out = {"records_per_file": reader.num_records(), "single_us": single / count * 1e6, "bulk_us": bulk / count * 1e6}
    reader.close()
    return out


# --- the two sides ------------------------------------------------------------------------------------

def ours(case) -> tuple:
    from batchloaders import build_input_fn
    return (lambda: build_input_fn(case["config"])()), (lambda dataset: dataset.as_numpy_iterator())


def grain_side(case, setting: str) -> tuple:
    """The ArrayRecord peer: a MapDataset over the converted files, records in turn."""
    import grain
    from grain.sources import ArrayRecordDataSource

    parse = Parser(case["kind"], case["descriptors"])
    batch_fn = pad_batch if case["kind"] == "speech" else None

    def make():
        dataset = grain.MapDataset.source(ArrayRecordDataSource(case["arrayrecord"])).map(parse)
        dataset = dataset.batch(case["batch_size"], batch_fn=batch_fn)
        if setting == "threads":
            return dataset.to_iter_dataset(grain.ReadOptions(num_threads=THREADS, prefetch_buffer_size=PREFETCH))
        return dataset.to_iter_dataset(grain.ReadOptions(num_threads=1, prefetch_buffer_size=2)).mp_prefetch(
            grain.MultiprocessingOptions(num_workers=WORKERS, per_worker_buffer_size=PREFETCH // WORKERS))
    return make, iter


def tfrecord_side(case, setting: str) -> tuple:
    """The TFRecord peer: grain's ``TFRecordIterDataset`` per file (the files as they are), CYCLE files
    interleaved (``InterleaveIterDataset``), the same ``Parser``, batched; then 2 threads
    (``multithread_prefetch``) or 2 processes (``mp_prefetch``), each given its slice of the files."""
    import grain

    parse = Parser(case["kind"], case["descriptors"])
    batch_fn = pad_batch if case["kind"] == "speech" else None

    def make():
        files = [grain.experimental.TFRecordIterDataset(path) for path in case["tfrecord"]]
        dataset = grain.experimental.InterleaveIterDataset(files, cycle_length=CYCLE).map(parse)
        dataset = dataset.batch(case["batch_size"], batch_fn=batch_fn)
        if setting == "threads":
            return grain.experimental.multithread_prefetch(dataset, num_threads=THREADS, buffer_size=PREFETCH)
        return dataset.mp_prefetch(
            grain.MultiprocessingOptions(num_workers=WORKERS, per_worker_buffer_size=PREFETCH // WORKERS))
    return make, iter


SIDES = {"arrayrecord": grain_side, "tfrecord": tfrecord_side}


def settings_label(peer: str, setting: str) -> str:
    if peer == "tfrecord":
        head = f"grain TFRecordIterDataset, {CYCLE} files interleaved"
        if setting == "threads":
            return f"{head}, multithread_prefetch {THREADS} threads, {PREFETCH} batches ahead"
        return f"{head}, mp_prefetch {WORKERS} worker processes"
    if setting == "threads":
        return f"grain ArrayRecord, {THREADS} threads (ReadOptions), {PREFETCH} batches ahead"
    return f"grain ArrayRecord, mp_prefetch {WORKERS} worker processes, 1 thread each"


# --- cases, rounds, table -----------------------------------------------------------------------------

def load_cases(names, directory: str, peers) -> list[dict]:
    import bench_data
    import run  # deferred: imports TensorFlow (see epoch)

    descriptors = proto_descriptors()
    out = []
    for case in run.cases():
        if case.name not in names:
            continue
        source = os.path.join(directory, case.data)
        with open(os.path.join(source, "__manifest__.json")) as f:
            records = sum(entry["num_records"] for entry in json.load(f)["files"])
        item = {"name": case.name, "data": case.data, "batch_size": case.batch_size,
                "config": run.with_data(case.config, source), "records": records,
                "kind": case.data,  # floats, images or speech: what Parser parses
                "tfrecord": bench_data.files(source), "descriptors": descriptors,
                "arrayrecord": None, "read_cost": None, "conversion": None}
        if "arrayrecord" in peers:
            files, conversion = converted(directory, case.data)
            item.update(arrayrecord=files, read_cost=read_cost(files), conversion=conversion)
        out.append(item)
    return out


def check_same_work(name: str, reference: dict, other: dict) -> None:
    if other["digest"] != reference["digest"] or sorted(other["sizes"]) != sorted(reference["sizes"]):
        raise SystemExit(f"{name}: grain's examples or batch sizes differ from ours "
                         f"({len(other['sizes'])} batches, {sum(other['sizes'])} examples against "
                         f"{len(reference['sizes'])} and {sum(reference['sizes'])})")


def keep_setting(case: dict, peer: str, speech: bool, log) -> tuple[str, dict]:
    """Both settings of a peer on the first quarter of an epoch; the faster one and the trial's figures."""
    quarter = case["records"] // case["batch_size"] // 4
    trial = {s: drop_sizes(epoch(*SIDES[peer](case, s), speech, limit=quarter)) for s in ("threads", "processes")}
    kept = max(trial, key=lambda s: trial[s]["batches_per_s"])
    log(f"  {peer} on {quarter} batches: threads {trial['threads']['batches_per_s']:.1f} batches/s, processes "
        f"{trial['processes']['batches_per_s']:.1f}; keeping {kept}")
    return kept, trial


def run_case(case: dict, rounds: int, peers, log) -> dict:
    """Per peer both grain settings on the first quarter of an epoch, keep the faster; check ours and
    them; time ``rounds`` rounds of one epoch of each, the order rotating."""
    speech = case["kind"] == "speech"
    sides, kept, trials = {"ours": ours(case)}, {}, {}
    for peer in peers:
        kept[peer], trials[peer] = keep_setting(case, peer, speech, log)
        sides[peer] = SIDES[peer](case, kept[peer])
    checks = {name: epoch(*side, speech, check=True) for name, side in sides.items()}
    for peer in peers:
        check_same_work(f"{case['name']}, {settings_label(peer, kept[peer])}", checks["ours"], checks[peer])
    log(f"  same work: {len(checks['ours']['sizes'])} batches, {sum(checks['ours']['sizes'])} examples, "
        f"digest {checks['ours']['digest'][:16]}")
    names, timed = list(sides), {name: [] for name in sides}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            timed[name].append(drop_sizes(epoch(*sides[name], speech)))
            log(f"  round {r + 1} {name}: {timed[name][-1]['batches_per_s']:.1f} batches/s")
    return {"case": case["name"], "batch_size": case["batch_size"], "conversion": case["conversion"],
            "read_cost": case["read_cost"], "kept": kept, "trial": trials,
            "checks": {name: drop_sizes(c) for name, c in checks.items()}, "rounds": timed,
            "batches": len(checks["ours"]["sizes"]), "examples": sum(checks["ours"]["sizes"])}


def drop_sizes(measured: dict) -> dict:
    return {k: v for k, v in measured.items() if k != "sizes"}


FIELDS = ("build_ms", "first_ms", "batches_per_s", "examples_per_s", "frames_per_s", "cpu_s", "memory_mb",
          "workers_memory_mb", "epoch_s")


def medians(rounds: list[dict]) -> dict:
    return {f: None if rounds[0][f] is None else statistics.median(r[f] for r in rounds) for f in FIELDS}


def table(results: list[dict], imports: dict) -> list[str]:
    """Medians per side; ``vs ours``: the median of the per-round ratios of batches/s (verdict.paired)."""
    import verdict

    head = ("case", "pipeline", "set-up (once) s", "build+first ms", "batches/s", "examples/s", "frames/s",
            "CPU s/epoch", "RSS growth MB", "vs ours (lowest-highest, IQR)")
    rows = []
    for res in results:
        mine = [r["batches_per_s"] for r in res["rounds"]["ours"]]
        for name, rounds in res["rounds"].items():
            m = medians(rounds)
            if name == "ours":
                label, once, versus = "ours (as_numpy_iterator)", f"import {imports['ours']:.1f}", ""
            else:
                label = settings_label(name, res["kept"][name])
                once = f"import {imports['grain']:.1f}" + (
                    f" + convert {res['conversion']['seconds']:.0f}" if name == "arrayrecord" else "")
                versus = verdict.describe(verdict.paired([r["batches_per_s"] for r in rounds], mine))
            memory = f"{m['memory_mb']:.0f}" + (f" + {m['workers_memory_mb']:.0f} workers"
                                                  if m["workers_memory_mb"] else "")
            rows.append((res["case"], label, once, f"{m['build_ms']:.0f} + {m['first_ms']:.0f}",
                         f"{m['batches_per_s']:.1f}", f"{m['examples_per_s']:,.0f}",
                         "" if m["frames_per_s"] is None else f"{m['frames_per_s']:,.0f}", f"{m['cpu_s']:.1f}",
                         memory, versus))
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    return ["  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
            for row in [head, tuple("-" * w for w in widths)] + rows]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS),
                        help="arrayrecord (converted copy; needs array-record), tfrecord (the files as they are)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating timed epochs per side (default 3)")
    parser.add_argument("--data", help="the benchmark data directory (default: benchmarks/data, written if missing)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        import grain
        if "arrayrecord" in args.peers:
            import array_record.python.array_record_module  # noqa: F401
        if "tfrecord" in args.peers and not hasattr(getattr(grain, "experimental", None), "TFRecordIterDataset"):
            raise ImportError("grain.experimental.TFRecordIterDataset (grain >= 0.2.18)")
    except ImportError as error:
        print(f"grain_peer: grain (>= 0.2.18) and array-record are not installed ({error}); this comparison is "
              "informational and is skipped. `pip install grain array-record` (or with --target DIR and "
              "GRAIN_SITE=DIR) to run it.")
        return 0
    imports = {"grain": time.perf_counter() - start}
    from absl import flags
    if not flags.FLAGS.is_parsed():  # grain reads its absl flags (their defaults here) when it starts workers
        flags.FLAGS([sys.argv[0]])
    start = time.perf_counter()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, HERE)
    sys.path.insert(0, os.path.dirname(HERE))  # the repository, when the package is not installed
    import batchloaders  # noqa: F401
    import tensorflow  # noqa: F401
    imports["ours"] = time.perf_counter() - start
    import bench_data
    directory = os.path.abspath(args.data) if args.data else os.path.dirname(bench_data.generate()["floats"])
    loads = [os.getloadavg()]
    results = []
    for case in load_cases(args.cases, directory, args.peers):
        cost = case["read_cost"]
        if cost:
            print(f"{case['name']}: {case['conversion']['records']:,} records converted in "
                  f"{case['conversion']['seconds']:.1f} s; array_record reads {cost['single_us']:.0f} us per "
                  f"record one at a time, {cost['bulk_us']:.1f} us in one call ({cost['records_per_file']:,} per "
                  "file)", flush=True)
        print(f"{case['name']}: load average {os.getloadavg()[0]:.2f}", flush=True)
        results.append(run_case(case, args.rounds, args.peers, lambda line: print(line, flush=True)))
        loads.append(os.getloadavg())
    print("\n".join(table(results, imports)))
    print("load average (1 min) at the start and after each case: " + ", ".join(f"{l[0]:.2f}" for l in loads))
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"imports_s": imports, "load_average": loads, "cpus": os.cpu_count(),
                   "settings": {peer: {s: settings_label(peer, s) for s in ("threads", "processes")}
                                for peer in args.peers}, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
