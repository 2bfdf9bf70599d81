"""The tf.data service: the compiled pipeline run by a real dispatcher and two workers on localhost.

Data: three files of Examples; record r of file f holds id = 100*f + r and x = [id, id + 0.5], so every
example that arrives says which file and record it is. The servers are TensorFlow's own (DispatchServer,
WorkerServer) in this process, on ports the system chooses; ``serve`` is run as the console script.
"""
from __future__ import annotations

import collections
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import tensorflow as tf

from batchloaders import ConfigError, ServiceError, build_input_fn, load_config
from batchloaders.runtime import resume, service
from conftest import example, feature, loader_config, write_manifest, write_records

REPO = pathlib.Path(__file__).resolve().parents[1]
RECORDS = 7
IDS = [100 * f + r for f in range(3) for r in range(RECORDS)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("service") / "numbered"
    write_manifest(d, [feature("id", "int64", [], "int"), feature("x", "float32", [2], "float")])
    for f in range(3):
        write_records(d / f"part-{f}.tfrecords", [example(id=("int", [100 * f + r]), x=("float", [100 * f + r,
                                                                                                  100 * f + r + .5]))
                                                  for r in range(RECORDS)])
    return d


# Deleting a worker waits for its heartbeat thread to wake: with TensorFlow's 30 s interval the
# module's teardown took 15-60 s.
HEARTBEAT_MS = 200


@pytest.fixture(scope="module")
def servers():
    """A dispatcher and two workers (dynamic registration); yields the dispatcher's HOST:PORT."""
    dispatcher = service.start_dispatcher()
    address = service.bound_address(dispatcher)
    workers = [service.start_worker(address, heartbeat_ms=HEARTBEAT_MS) for _ in range(2)]
    yield address
    for server in workers + [dispatcher]:
        server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def fixed_servers():
    """A dispatcher knowing its two workers in advance (what file and data sharding need)."""
    ports = [free_port(), free_port()]
    dispatcher = service.start_dispatcher(worker_addresses=[f"localhost:{p}" for p in ports])
    address = service.bound_address(dispatcher)
    workers = [service.start_worker(address, p, "localhost:%port%", heartbeat_ms=HEARTBEAT_MS) for p in ports]
    yield address
    for server in workers + [dispatcher]:
        server.stop()


def config(data, address, **block):
    return loader_config(data, [("id", "id"), ("x", "x")], inputs=["x"], targets=["id"], target_batch_size=3,
                         service={"address": address, **block})


def examples(dataset):
    """(id, x) of every example of every batch, in arrival order."""
    out = []
    for features, targets in dataset.as_numpy_iterator():
        out += [(int(i), tuple(float(v) for v in x)) for i, x in zip(targets["id"], features["x"])]
    return out


def local(cfg):
    return build_input_fn({**cfg, "args": {k: v for k, v in cfg["args"].items() if k != "service"}})()


def test_dynamic_gives_every_example_exactly_once(data, servers):
    cfg = config(data, servers, processing_mode="dynamic")
    got = examples(build_input_fn(cfg)())
    assert sorted(got) == [(i, (float(i), i + .5)) for i in IDS]
    assert collections.Counter(got) == collections.Counter(examples(local(cfg)))


def test_each_call_of_a_service_config_builds_its_own_dataset(data, servers):
    """runtime/reuse.py keeps no service pipeline: each call's client is made with that call's address and job."""
    input_fn = build_input_fn(config(data, servers, processing_mode="dynamic"))
    first, second = input_fn(), input_fn()
    assert first is not second
    assert sorted(examples(first)) == sorted(examples(second)) == [(i, (float(i), i + .5)) for i in IDS]


def test_off_gives_every_example_once_per_worker(data, servers):
    cfg = config(data, servers, processing_mode="off")
    got = examples(build_input_fn(cfg)())
    assert collections.Counter(got) == collections.Counter({(i, (float(i), i + .5)): 2 for i in IDS})
    assert collections.Counter(got) == collections.Counter(examples(local(cfg)) * 2)


# Batch sizes say how the work was split: by files, one worker reads files 0 and 2 (14 examples: 3, 3, 3, 3,
# 2), the other file 1 (7: 3, 3, 1); by data, both make the local 7 batches of 3 and keep every other one.
@pytest.mark.parametrize("mode, sizes", [("file", [1, 2, 3, 3, 3, 3, 3, 3]), ("data", [3] * 7),
                                         ("file_or_data", [1, 2, 3, 3, 3, 3, 3, 3])])
def test_static_sharding_gives_every_example_exactly_once(data, fixed_servers, mode, sizes):
    dataset = build_input_fn(config(data, fixed_servers, processing_mode=mode, job_name=f"static-{mode}"))()
    batches = [(features["x"], targets["id"]) for features, targets in dataset.as_numpy_iterator()]
    got = [(int(i), tuple(float(v) for v in x)) for xs, ids in batches for i, x in zip(ids, xs)]
    assert sorted(got) == [(i, (float(i), i + .5)) for i in IDS]
    assert sorted(len(ids) for _, ids in batches) == sizes


def test_batches_are_made_on_the_workers(data, servers):
    """The consumer receives whole batches (the workers batch), shaped as the local pipeline's."""
    cfg = config(data, servers, processing_mode="off", compression="NONE", max_outstanding_requests=2)
    dataset = build_input_fn(cfg)()
    assert dataset.element_spec == local(cfg).element_spec
    sizes = sorted(len(targets["id"]) for _, targets in dataset.as_numpy_iterator())
    assert sizes == [3] * 14  # 21 examples per worker, in 7 full batches each


@pytest.mark.parametrize("mode", ["dynamic", "data", "file_or_data"])
def test_a_sequence_loader_through_the_service(request, data, mode):
    """discrete_sequence windows of 3 whole records: two per file, each exactly once (file_or_data falls
    back to data: file sharding cannot follow the window making, see test_file_sharding_refuses_...)."""
    address = request.getfixturevalue("servers" if mode == "dynamic" else "fixed_servers")
    cfg = loader_config(data, [("id", "id"), ("x", "x")], inputs=["id", "x"], loader="discrete_sequence",
                        min_window=3, max_window=3, target_batch_size=2,
                        service={"address": address, "processing_mode": mode, "job_name": f"sequence-{mode}"})
    windows = [tuple(row) for batch in build_input_fn(cfg)().as_numpy_iterator() for row in batch["id"].tolist()]
    assert sorted(windows) == [(100 * f + r, 100 * f + r + 1, 100 * f + r + 2) for f in range(3) for r in (0, 3)]


def test_shuffled_file_sharding_gives_every_example_exactly_once(data, fixed_servers):
    cfg = config(data, fixed_servers, processing_mode="file", job_name="shuffled-file")
    cfg["args"].update(shuffle=True, num_shuffle_buffer_elements=5, num_filenames_shuffle_buffer=3, num_mix_files=2,
                       seed=3, num_parallel_reads=2)
    assert sorted(examples(build_input_fn(cfg)())) == [(i, (float(i), i + .5)) for i in IDS]


@pytest.mark.parametrize("what, args", [
    ("the discrete_sequence loader", dict(loader="discrete_sequence", min_window=3, max_window=3)),
    ("segmenting", dict(segmenting={"num_unroll": 2})),
    ("bucketing", dict(bucketing={"by": "x", "boundaries": [2], "batch_sizes": [2, 2]})),
])
def test_file_sharding_refuses_what_it_cannot_follow(tmp_path, what, args):
    """Measured: these pipelines fail on every worker at the first batch ('Did not find a shardable source')."""
    write_manifest(tmp_path, [feature("x", "int64", [], "int", var_len=True)], allow_var_len=True)
    write_records(tmp_path / "a.tfrecords", [])
    cfg = loader_config(tmp_path, [("x", "x")], inputs=["x"], padding=True, epochs=None,
                        service={"address": "localhost:5050", "processing_mode": "file"}, **args)
    with pytest.raises(ConfigError) as raised:
        load_config(cfg)
    assert [(p.path, p.message) for p in raised.value.problems] == [("$.args.service.processing_mode", (
        f"found processing_mode 'file' with {what}: TensorFlow's file sharding cannot trace such a pipeline back "
        "to its list of data files, and every worker would fail at its first batch ('Did not find a shardable "
        "source'); expected 'dynamic' (files handed out as the workers ask), 'data', or 'file_or_data' (which "
        "falls back to data)"))]


def test_params_service_address_replaces_the_configs(data, servers):
    with socket.socket() as closed:  # bound, never listening: nothing answers there
        closed.bind(("localhost", 0))
        dead = f"localhost:{closed.getsockname()[1]}"
        input_fn = build_input_fn(config(data, dead))
        assert sorted(i for i, _ in examples(input_fn(params={"service_address": servers}))) == IDS
        with pytest.raises(ServiceError) as raised:
            input_fn()
        with pytest.raises(ServiceError) as overridden:
            build_input_fn(config(data, servers))(params={"service_address": dead})
    why = (f"no tf.data service dispatcher answers at grpc://{dead} (Connection refused, waited at most 10 s): "
           "expected a running dispatcher (`batchloaders serve --dispatcher` prints its address; "
           "params[\"service_address\"] replaces the config's)")
    assert str(raised.value) == f"<dict>: $.args.service.address: {why}"
    assert str(overridden.value) == f"<params>: $.service_address: {why}"


def test_a_bad_params_service_address_is_a_config_error(data, servers):
    with pytest.raises(ConfigError) as raised:
        build_input_fn(config(data, servers))(params={"service_address": "dispatcher"})
    assert str(raised.value) == (
        "<params>: $.service_address: found 'dispatcher': expected a dispatcher address HOST:PORT or "
        "grpc://HOST:PORT (what `batchloaders serve --dispatcher` prints), e.g. 'localhost:5050'")


def test_validation_never_connects(data):
    """A fixed address validates wherever nothing listens there; the block is resolved as written."""
    cfg = config(data, "dispatcher.example.com:5050", job_name="j", num_consumers=2, consumer_index=1)
    cfg["args"]["epochs"] = None
    loaded = load_config(cfg)
    assert loaded.service == service.ServiceConfig("grpc://dispatcher.example.com:5050", "dynamic", "j", 2, 1)


@pytest.mark.parametrize("args, report", [
    (dict(on_corrupt="skip_file"), "skipped"),
    (dict(chunking={"size": 2}), "chunk_report"),
    (dict(segmenting={"num_unroll": 2}), "segment_report"),
])
def test_reports_are_none_under_the_service(tmp_path, args, report):
    """Counters would count in the workers' copies of their tables: input_fn does not pretend they are zero
    (locally the same config reports)."""
    write_manifest(tmp_path, [feature("x", "int64", [], "int", var_len=True)], allow_var_len=True)
    write_records(tmp_path / "a.tfrecords", [])
    cfg = loader_config(tmp_path, [("x", "x")], inputs=["x"], padding=True, **args)
    assert getattr(build_input_fn(cfg), report)() is not None
    cfg["args"]["service"] = {"address": "localhost:5050"}
    assert getattr(build_input_fn(cfg), report)() is None


# (the service block, the JSON path of the one problem, its message)
BAD_BLOCKS = [
    ({}, "$.args.service", "missing required key 'address'"),
    ({"address": "localhost"}, "$.args.service.address",
     "invalid dispatcher address 'localhost'; expected a form like localhost:5050 or "
     "grpc://dispatcher.example.com:5050"),
    ({"address": "http://localhost:5050"}, "$.args.service.address",
     "invalid dispatcher address 'http://localhost:5050'; expected a form like localhost:5050 or "
     "grpc://dispatcher.example.com:5050"),
    ({"address": "localhost:0"}, "$.args.service.address",
     "found port 0 in 'localhost:0': expected a port from 1 to 65535"),
    ({"address": "localhost:70000"}, "$.args.service.address",
     "found port 70000 in 'localhost:70000': expected a port from 1 to 65535"),
    ({"address": "localhost:5050", "processing_mode": "parallel_epochs"}, "$.args.service.processing_mode",
     "unexpected value 'parallel_epochs'; expected one of: off, dynamic, file, data, file_or_data"),
    ({"address": "localhost:5050", "target_workers": "local"}, "$.args.service.target_workers",
     "unexpected value 'local'; expected one of: AUTO, ANY, LOCAL"),
    ({"address": "localhost:5050", "compression": "gzip"}, "$.args.service.compression",
     "unexpected value 'gzip'; expected one of: AUTO, NONE, SNAPPY"),
    ({"address": "localhost:5050", "jobname": "j"}, "$.args.service.jobname",
     "unknown key 'jobname' (did you mean 'job_name'?); closest allowed keys: job_name, consumer_index, compression; "
     "see the reference: docs/reference.md"),
    ({"address": "localhost:5050", "batch_timeout_seconds": 0}, "$.args.service.batch_timeout_seconds",
     "expected a number > 0, found 0"),
    ({"address": "localhost:5050", "batch_timeout_seconds": 86401}, "$.args.service.batch_timeout_seconds",
     "expected a number <= 86400, found 86401"),
    ({"address": "localhost:5050", "batch_timeout_seconds": "5 s"}, "$.args.service.batch_timeout_seconds",
     "expected number or null, found string '5 s'"),
    ({"address": "localhost:5050", "max_outstanding_requests": 0}, "$.args.service.max_outstanding_requests",
     "expected an integer >= 1, found 0"),
    ({"address": "localhost:5050", "job_name": "j", "consumer_index": 0}, "$.args.service.consumer_index",
     "found consumer_index without num_consumers: expected both (coordinated reads: each trainer reads its turn, "
     "consumer_index, of num_consumers) or neither"),
    ({"address": "localhost:5050", "job_name": "j", "num_consumers": 2}, "$.args.service.num_consumers",
     "found num_consumers without consumer_index: expected both (coordinated reads: each trainer reads its turn, "
     "consumer_index, of num_consumers) or neither"),
    ({"address": "localhost:5050", "job_name": "j", "num_consumers": 2, "consumer_index": 2},
     "$.args.service.consumer_index", "found consumer_index 2 with num_consumers 2: expected an index from 0 to 1"),
    ({"address": "localhost:5050", "job_name": "j", "num_consumers": 2, "consumer_index": 0, "processing_mode": "data"},
     "$.args.service.num_consumers", "found num_consumers with processing_mode 'data': expected 'off' or 'dynamic' "
     "(TensorFlow's coordinated reads support no other sharding)"),
    ({"address": "localhost:5050", "num_consumers": 2, "consumer_index": 0}, "$.args.service.num_consumers",
     "found num_consumers without job_name: expected a job_name (the trainers take turns reading one shared job, "
     "which a name identifies)"),
]


@pytest.mark.parametrize("block, seconds", [({}, 300.0), ({"batch_timeout_seconds": 2.5}, 2.5),
                                            ({"batch_timeout_seconds": None}, None)])
def test_batch_timeout_seconds_is_read_as_written_or_300(data, block, seconds):
    """None: TensorFlow's own wait, for ever. Not part of the pipeline's identity: it changes no batch."""
    loaded = load_config(config(data, "localhost:5050", **block))
    assert loaded.service.batch_timeout_seconds == seconds
    assert resume.fingerprint(loaded, 3) == resume.fingerprint(load_config(config(data, "localhost:5050")), 3)


@pytest.mark.parametrize("block, path, message", BAD_BLOCKS)
def test_bad_service_blocks(data, block, path, message):
    cfg = loader_config(data, [("id", "id")], inputs=["id"], epochs=None, service=block)
    with pytest.raises(ConfigError) as raised:
        load_config(cfg)
    assert [(p.path, p.message) for p in raised.value.problems] == [(path, message)]


def test_coordinated_reads_take_turns(data, servers):
    """Two trainers (threads here) of one job, num_consumers 2, mode off: every round is two consecutive batches
    (2j, 2j + 1) of one worker's stream, consumer 0 taking the first and consumer 1 the second; both workers
    make the local stream, and each serves its rounds j = 0, 1, ... in order (which worker serves a round is
    TensorFlow's choice)."""
    got = {}

    def read(index):
        cfg = config(data, servers, processing_mode="off", job_name="coordinated", num_consumers=2,
                     consumer_index=index)
        cfg["args"]["epochs"] = None
        got[index] = [targets["id"].tolist() for _, targets in build_input_fn(cfg)().take(4).as_numpy_iterator()]

    threads = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    ids = IDS * 2  # the local stream (epochs null) in batches of 3: b0 = 0, 1, 2; b1 = 3, 4, 5; b2 = 6, 100, 101 ...
    pairs = [(ids[6 * j:6 * j + 3], ids[6 * j + 3:6 * j + 6]) for j in range(4)]
    rounds = [pairs.index(pair) for pair in zip(got[0], got[1])]  # ValueError: a round that is no such pair
    per_worker = collections.Counter(rounds)
    assert rounds[0] == 0 and all(per_worker[j - 1] >= n for j, n in per_worker.items() if j) and max(
        per_worker.values()) <= 2


def test_coordinated_reads_need_an_endless_stream(data):
    cfg = config(data, "localhost:5050", job_name="j", num_consumers=2, consumer_index=0)
    with pytest.raises(ConfigError) as raised:
        load_config(cfg)
    assert str(raised.value) == (
        "<dict>: $.args.service.num_consumers: found num_consumers with epochs 1: expected epochs null (in "
        "coordinated reads a trainer whose workers run out of data first would leave the others waiting for "
        "their turn forever)")


# --- batchloaders serve, as the console script ---

def serve(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.Popen([sys.executable, "-m", "batchloaders", "serve", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []
    yield started
    for process in started:  # whatever the test did: none is left behind
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


def test_serve_starts_a_dispatcher_and_a_worker_a_client_uses(processes):
    processes.append(serve("--dispatcher"))
    dispatcher = processes[0].stdout.readline().strip()
    assert dispatcher.startswith("localhost:") and int(dispatcher.split(":")[1]) > 0
    socket.create_connection(("127.0.0.2", int(dispatcher.split(":")[1])), timeout=5).close()  # not 127.0.0.1 only
    processes.append(serve("--worker", dispatcher))
    worker = processes[1].stdout.readline().strip()
    assert worker.startswith("localhost:") and worker != dispatcher
    ds = tf.data.Dataset.range(5).apply(tf.data.experimental.service.distribute("parallel_epochs", dispatcher))
    assert sorted(ds.as_numpy_iterator()) == [0, 1, 2, 3, 4]
    for process, address, number in zip(processes[::-1], (worker, dispatcher), (signal.SIGTERM, signal.SIGINT)):
        process.send_signal(number)
        out, err = process.communicate(timeout=30)
        port = address.rpartition(":")[2]
        assert (process.returncode, out, err) == (0, "", (
            f"batchloaders serve: listening on all interfaces, port {port}, without authentication: whoever reaches "
            "it can run pipelines that read and write files as this user\n"))


@pytest.mark.parametrize("args, message", [
    (["--worker", "localhost"], "batchloaders serve: error: found 'localhost': expected a dispatcher address"),
    (["--worker", "localhost:5050", "--work-dir", "x"],
     "batchloaders serve: error: --work-dir and --worker-addresses are options of --dispatcher"),
    (["--dispatcher", "--port", "65536"], "argument --port: found '65536': expected a port from 0 to 65535"),
])
def test_serve_usage_errors(processes, args, message):
    processes.append(serve(*args))
    out, err = processes[0].communicate(timeout=60)
    assert (processes[0].returncode, out) == (2, "")
    assert message in err


def test_serve_worker_of_a_dispatcher_that_does_not_answer(processes):
    with socket.socket() as closed:
        closed.bind(("localhost", 0))
        address = f"localhost:{closed.getsockname()[1]}"
        processes.append(serve("--worker", address))
        out, err = processes[0].communicate(timeout=60)
    assert (processes[0].returncode, out) == (1, "")
    assert err == (f"batchloaders serve: error: no tf.data service dispatcher answers at {address} (Connection "
                   "refused, waited at most 10 s): expected a running dispatcher (serve --dispatcher)\n")


def test_serve_dispatcher_with_a_journal(processes, tmp_path):
    """--work-dir: a fault-tolerant dispatcher writes its journal there; SIGTERM still ends it with 0."""
    processes.append(serve("--dispatcher", "--work-dir", str(tmp_path / "journal")))
    address = processes[0].stdout.readline().strip()
    assert address.startswith("localhost:") and int(address.split(":")[1]) > 0
    assert (tmp_path / "journal").is_dir()
    processes[0].send_signal(signal.SIGTERM)
    out, err = processes[0].communicate(timeout=30)
    assert (processes[0].returncode, out) == (0, "") and err.startswith("batchloaders serve: listening on all interfaces")


@pytest.mark.parametrize("mix", [2, 3])
def test_dynamic_shuffled_gives_every_example_exactly_once(data, servers, mix):
    """Shuffled names before an interleave of several files gave every record once per worker (TF 2.21):
    under dynamic the names are handed out unshuffled and the records shuffled in the buffer."""
    cfg = config(data, servers, processing_mode="dynamic")
    cfg["args"].update(shuffle=True, num_mix_files=mix, num_shuffle_buffer_elements=8, num_filenames_shuffle_buffer=3,
                       seed=3, epochs=2)
    got = examples(build_input_fn(cfg)())
    assert collections.Counter(got) == collections.Counter({(i, (float(i), i + .5)): 2 for i in IDS})


def test_under_the_service_input_pipelines_share_a_job_instead_of_sharding(data, servers, caplog):
    """Two input pipelines with one job_name: not sharded by the loader (that shards each worker's part again,
    losing and repeating files); together they get every example once."""
    cfg = config(data, servers, processing_mode="dynamic", job_name="two-trainers")
    input_fn = build_input_fn(cfg)
    got = []
    with caplog.at_level("INFO", logger="batchloaders"):
        for pipeline in range(2):
            got += examples(input_fn(tf.distribute.InputContext(2, pipeline, 1)))
    assert sorted(got) == [(i, (float(i), i + .5)) for i in IDS]
    assert [r.getMessage() for r in caplog.records] == [
        "not sharded by input pipeline: the tf.data service splits the data among its workers (trainers sharing "
        "a job_name get disjoint batches)"] * 2


def test_a_service_address_without_a_service_block_is_a_config_error(data):
    cfg = loader_config(data, [("id", "id"), ("x", "x")], inputs=["x"], targets=["id"], target_batch_size=3)
    with pytest.raises(ConfigError) as caught:
        build_input_fn(cfg)(params={"service_address": "localhost:5050"})
    problem = caught.value.problems[0]
    assert (problem.file, problem.path) == ("<params>", "$.service_address")
    assert "has no service block" in problem.message and "'localhost:5050'" in problem.message


def test_serve_on_a_port_in_use_says_so_in_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("localhost", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "batchloaders", "serve", "--dispatcher", "--port", str(port)],
                              capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr  # gRPC's own log line may come first (it logs from C++)
    assert done.stderr.strip().splitlines()[-1].startswith(
        f"batchloaders serve: error: the server did not start on port {port}")


@pytest.mark.parametrize("mode", ["state", "replay"])
def test_a_resumable_iterator_over_the_service_is_a_config_error(data, mode):
    """The workers' answering order is no run's to repeat, and the service's iterators cannot be saved: a replay
    would skip other batches than those consumed. Refused before anything connects."""
    from batchloaders import ResumableIterator

    input_fn = build_input_fn(config(data, "dispatcher.example.com:5050"))
    with pytest.raises(ConfigError) as raised:
        ResumableIterator(input_fn, mode=mode)
    problem = raised.value.problems[0]
    assert (problem.path, problem.message.split(":")[0]) == (
        "$.args.service", "ResumableIterator over a pipeline that runs on a tf.data service")


# --- a worker that stops for good: the wait for a batch is bounded (batch_timeout_seconds) ---

FILES, PER_FILE = 4, 300  # enough that a worker stopped after the third batch still holds unfinished data
WAIT = 2.0
HANG = 600.0  # a reader still waiting after this is stuck, however loaded the machine: not a speed bound


@pytest.fixture(scope="module")
def big_data(tmp_path_factory):
    """4 files x 300 Examples; record r of file f holds id = 1000*f + r and x = [id, id + 0.5]."""
    d = tmp_path_factory.mktemp("service") / "big"
    write_manifest(d, [feature("id", "int64", [], "int"), feature("x", "float32", [2], "float")])
    for f in range(FILES):
        write_records(d / f"part-{f}.tfrecords", [example(id=("int", [1000 * f + r]), x=("float", [1000 * f + r,
                                                                                                    1000 * f + r + .5]))
                                                  for r in range(PER_FILE)])
    return d


def read_until_stopped(iterator, stop_worker) -> tuple[list, object, float]:
    """(examples, what ended the reading, seconds from the last batch to that end); stops a worker after the
    third batch. The reading runs in a thread joined with a bound: an endless wait fails the test."""
    got, ended, times = [], [], []

    def read():
        try:
            for n, (features, targets) in enumerate(iterator, 1):
                got.extend((int(i), tuple(float(v) for v in x)) for i, x in zip(targets["id"], features["x"]))
                times.append(time.monotonic())
                if n == 3:
                    stop_worker()
            ended.append("end of data")
        except ServiceError as error:
            ended.append(error)
        times.append(time.monotonic())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(HANG)
    assert ended, "no batch, no error and no end of data: the consumer still waits"
    return got, ended[0], times[-1] - times[-2]


def timeout_message(address: str) -> str:
    return (f"<dict>: $.args.service.batch_timeout_seconds: no batch from the tf.data service at grpc://{address} "
            f"within {WAIT:g} s: a worker stopped with its part of the data unfinished (TensorFlow waits for it to "
            "come back at its address and never ends the epoch without it), or the dispatcher stopped; expected "
            "every worker to run until the end of the data (a worker restarted with the same --port carries on), "
            "or a longer batch_timeout_seconds for batches that take longer to make")


BIG_IDS = [1000 * f + r for f in range(FILES) for r in range(PER_FILE)]


# (processing mode, shuffled, fewest and most copies of each example): dynamic hands each file to one worker and
# loses what the stopped one held (at most once); off runs the whole epoch on each worker, so the surviving
# worker's copy is whole and the stopped one's partial.
@pytest.mark.parametrize("mode, shuffled, copies", [("dynamic", False, (0, 1)), ("dynamic", True, (0, 1)),
                                                    ("off", False, (1, 2)), ("off", True, (1, 2))])
def test_a_stopped_worker_ends_the_wait_with_a_service_error(big_data, mode, shuffled, copies):
    dispatcher = service.start_dispatcher()
    address = service.bound_address(dispatcher)
    workers = [service.start_worker(address, heartbeat_ms=HEARTBEAT_MS) for _ in range(2)]
    cfg = loader_config(big_data, [("id", "id"), ("x", "x")], inputs=["x"], targets=["id"], target_batch_size=10,
                        service={"address": address, "processing_mode": mode, "batch_timeout_seconds": WAIT})
    if shuffled:
        cfg["args"].update(shuffle=True, num_shuffle_buffer_elements=50, num_filenames_shuffle_buffer=4, num_mix_files=2,
                           seed=5)
    try:
        iterator = iter(build_input_fn(cfg)())
        got, ended, waited = read_until_stopped(iterator, workers[0].stop)
        started = time.monotonic()
        with pytest.raises(ServiceError) as again:  # the iterator is cancelled: the same error, at once
            next(iterator)
    finally:
        for server in workers + [dispatcher]:
            server.stop()
    assert str(ended) == timeout_message(address) == str(again.value)
    # The wait ended (read_until_stopped: within HANG), not before batch_timeout_seconds; the second call did
    # not wait again, which would take WAIT more.
    assert WAIT <= waited and time.monotonic() - started < WAIT
    counts = collections.Counter(got)
    assert set(counts) <= {(i, (float(i), i + .5)) for i in BIG_IDS}  # every example a real record, intact
    assert copies[0] <= min(counts.get((i, (float(i), i + .5)), 0) for i in BIG_IDS)
    assert max(counts.values()) <= copies[1] and len(got) < copies[1] * len(BIG_IDS)  # the stopped one's part lost
