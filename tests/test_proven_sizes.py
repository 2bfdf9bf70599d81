"""Files whose manifest lists their sizes, read under ``on_corrupt: fail`` without the end-of-file accounting.

Each file's size is checked as it opens instead (read/proven.py). Records encode where they come from
(test_corruption.py's dataset: x = 100 * file + record, two files of 6 records, A damaged).
"""
from __future__ import annotations

import json
import os

import pytest
import tensorflow as tf

import batchloaders
from batchloaders.read.proven import OPENED, size_probe
from batchloaders.runtime.translate import data_error_from
from conftest import frame_offsets, write_records
from test_corruption import A, AT, B, B_CODES, BAD, GOOD, RECORDS, a_codes, config, flip, framed, make_dataset, record, run


def listing(d: str, *, sizes: bool, counts: tuple[int, int] = (RECORDS, RECORDS)) -> str:
    """The manifest of ``d`` lists each file's count, and its size now when ``sizes``."""
    path = os.path.join(d, "__manifest__.json")
    with open(path) as f:
        manifest = json.load(f)
    manifest["files"] = [{"name": n, "num_records": c, **({"size_bytes": os.path.getsize(os.path.join(d, n))}
                                                           if sizes else {})}
                         for n, c in zip(("a.tfrecords", "b.tfrecords"), counts)]
    with open(path, "w") as f:
        json.dump(manifest, f)
    return path


def cut(path: str, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def delivered(input_fn, during=None) -> tuple[list[int], batchloaders.DataError | None]:
    """(each example's code, in order; the DataError that ended the run, or None); ``during()`` runs after
    the first batch."""
    codes, error = [], None
    try:
        with batchloaders.data_errors():
            for batch in input_fn():
                if not codes and during is not None:
                    during()
                codes += batch["x"].numpy().reshape(-1, 2)[:, 0].tolist()
    except batchloaders.DataError as e:
        error = e
    return codes, error


def scans(dataset: tf.data.Dataset) -> int:
    """ScanDataset ops in the dataset's graph, its functions' included."""
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())  # noqa: SLF001
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    return sum(n.op == "ScanDataset" for n in nodes)


# sizes listed, policy -> (A's records delivered, what the error says; None: skipped and counted)
CUT_BEFORE = {
    (True, "fail"): (None, "bytes for this file (size_bytes), but it is {found} bytes when it is opened"),
    (False, "fail"): (3, "lists 6 records for this file, but 3 were read"),
    (True, "skip_file"): (3, None),
    (False, "skip_file"): (3, None),
}


@pytest.mark.parametrize("sizes,policy", list(CUT_BEFORE), ids=[f"{'sizes' if s else 'counts only'}-{p}"
                                                                  for s, p in CUT_BEFORE])
def test_a_file_cut_at_a_record_boundary_before_the_run(tmp_path, sizes, policy):
    d = make_dataset(tmp_path, "intact")
    manifest = listing(d, sizes=sizes)
    input_fn = batchloaders.build_input_fn(config(d, "independent", False, policy))
    a = os.path.join(d, "a.tfrecords")
    listed = os.path.getsize(a)
    cut(a, AT[BAD])  # after the build (which checks sizes too), before the run
    codes, error = [], None
    try:
        with batchloaders.data_errors():
            for batch in input_fn():
                codes += batch["x"].numpy().reshape(-1, 2)[:, 0].tolist()
    except batchloaders.DataError as e:
        error = e
    delivered, says = CUT_BEFORE[sizes, policy]
    if policy == "skip_file":
        assert error is None and sorted(codes) == a_codes(3) + B_CODES
        report = input_fn.skipped()
        assert report.files == {a: 3} and report.skipped_records == RECORDS - 3
        return
    problem = error.problems[0]
    assert problem.file == a and says.format(found=AT[BAD]) in problem.message
    if sizes:  # nothing of A is read: the file's size is checked as it opens
        assert codes == [] and problem.path == f"batchloaders data error at byte {AT[BAD]}"
        assert f"the manifest {manifest} lists {listed} bytes for this file" in problem.message
    else:
        assert codes == a_codes(delivered)


def test_a_file_gone_before_its_size_is_checked_cannot_be_opened(tmp_path):
    d = make_dataset(tmp_path, "intact")
    listing(d, sizes=True)
    dataset = batchloaders.build_input_fn(config(d, "independent", False, "fail"))()
    os.remove(os.path.join(d, "a.tfrecords"))
    with pytest.raises(batchloaders.DataError) as caught:
        with batchloaders.data_errors():
            list(dataset)
    problem = caught.value.problems[0]
    assert (problem.file, problem.path) == (os.path.join(d, "a.tfrecords"), "open")


@pytest.mark.parametrize("case,delivered", [("flipped byte in payload", 0), ("intact", 6)])
def test_damage_the_size_cannot_show_is_tensorflows_error_located(tmp_path, case, delivered):
    """A flipped byte keeps the size: TensorFlow's reader fails on it, and the error is placed by reading the
    files again. The block it is in (here the whole file) is not delivered."""
    d = make_dataset(tmp_path, case)
    listing(d, sizes=True)
    codes, error, _ = run(config(d, "independent", False, "fail"))
    assert codes == a_codes(delivered) + (B_CODES if case == "intact" else [])
    if case == "intact":
        assert error is None
        return
    problem = error.problems[0]
    assert problem.file == os.path.join(d, "a.tfrecords")
    assert problem.path == f"batchloaders data error at byte {AT[BAD]}, after record {BAD - 1} (the last good one; "\
                           "records count from 0)"
    assert "frame or checksum is damaged" in problem.message


# File A as written and listed before the build (its bytes, its count) -> what it is made after the build.
AT_OPEN = {
    "1 byte appended": (framed(GOOD), RECORDS, lambda data: data + b"\0"),
    "1 record appended": (framed(GOOD), RECORDS, lambda data: data + framed([record(A, RECORDS)])),
    "listed 0, left empty": (b"", 0, lambda data: data),
    "listed 0, 1 byte written": (b"", 0, lambda data: b"\0"),
    "listed 1, emptied": (b"\0", 0, lambda data: b""),
    "listed 1, 1 byte appended": (b"\0", 0, lambda data: data + b"\0"),
}


@pytest.mark.parametrize("case", list(AT_OPEN))
def test_a_file_not_its_listed_size_when_it_opens_delivers_nothing(tmp_path, case):
    """Longer or shorter by one byte, and the sizes 0 and 1 (the probe's edges): the size differs when A opens
    (files in order: nothing is delivered), or is the listed one (A read whole, B after it)."""
    before, count, change = AT_OPEN[case]
    d = make_dataset(tmp_path, "intact")
    a = os.path.join(d, "a.tfrecords")
    write(a, before)
    manifest = listing(d, sizes=True, counts=(count, RECORDS))
    input_fn = batchloaders.build_input_fn(config(d, "independent", False, "fail"))
    write(a, change(before))
    codes, error = delivered(input_fn)
    listed, now = len(before), len(change(before))
    if listed == now:
        assert error is None and codes == B_CODES
        return
    assert codes == []
    problem = error.problems[0]
    assert (problem.file, problem.path) == (a, f"batchloaders data error at byte {min(listed, now)}")
    # An empty file's two checks read the same count (none), which does not tell which one failed.
    when = "when it was checked" if listed == 0 else "when it is opened"
    assert problem.message.startswith(f"the manifest {manifest} lists {listed} bytes for this file (size_bytes), "
                                      f"but it is {now} bytes {when}: it was cut, appended to or "
                                      "replaced after the manifest was written")


LONG, CUT = 20000, 15000  # the run reads blocks of 1,024 records; A is cut at record CUT after its first batch,
# well past what the pipeline's buffers read ahead of it by then
DURING = {  # (loader, where A is cut) -> (A's size then, A's records delivered)
    # A record boundary or a header: TensorFlow's reader ends early; the size checked at the file's end says so.
    ("independent", "at a record boundary"): (lambda at: at[CUT], CUT),
    ("independent", "inside a header"): (lambda at: at[CUT] + 5, CUT),
    ("continuous_sequence", "at a record boundary"): (lambda at: at[CUT], CUT),
    ("discrete_sequence", "inside a header"): (lambda at: at[CUT] + 5, CUT),
    # A payload: TensorFlow's reader fails; its block (records 14336-15359) is not delivered: whole batches
    # before it are.
    ("independent", "inside a payload"): (lambda at: at[CUT] + 14, 14300),
}


@pytest.fixture(scope="module")
def long_records():
    return [record(0, i) for i in range(LONG)]


@pytest.mark.parametrize("loader,where", list(DURING), ids=[f"{l}-{w}" for l, w in DURING])
def test_a_file_cut_while_the_run_reads_it(tmp_path, long_records, loader, where):
    """What docs/damaged-data.md says: every record before a cut at a record boundary or inside a header is
    delivered, then the check of the size at the file's end names it; inside a record, TensorFlow's reader
    fails, located (the block holding the cut is not delivered)."""
    d = make_dataset(tmp_path, "intact")
    os.remove(os.path.join(d, "b.tfrecords"))
    a = write_records(os.path.join(d, "a.tfrecords"), long_records)
    listed = os.path.getsize(a)
    with open(os.path.join(d, "__manifest__.json")) as f:
        manifest = json.load(f)
    manifest["files"] = [{"name": "a.tfrecords", "num_records": LONG, "size_bytes": listed}]
    with open(os.path.join(d, "__manifest__.json"), "w") as f:
        json.dump(manifest, f)
    cfg = config(d, loader, False, "fail")
    cfg["args"].update(target_batch_size=100, num_prefetch=1)  # (not autotuned: a bounded read-ahead)
    size, count = DURING[loader, where]
    at = size(frame_offsets(long_records))
    codes, error = delivered(batchloaders.build_input_fn(cfg), lambda: cut(a, at))
    assert codes == list(range(count))
    problem = error.problems[0]
    assert problem.file == a
    if where == "inside a payload":
        assert problem.path.endswith(f", after record {CUT - 1} (the last good one; records count from 0)")
        return
    assert problem.path == f"batchloaders data error at byte {at}"
    assert f"lists {listed} bytes for this file (size_bytes), but it is {at} bytes when its last record has been " \
           "read: it was cut, appended to or replaced while the run read it" in problem.message


def test_a_file_rewritten_at_its_size_with_fewer_records_ends_the_count_naming_the_manifest(tmp_path):
    """The case the sizes leave: A rewritten at its listed size, records 4 and 5 replaced by one padded
    record (a feature the config does not read). The independent loader's count (12 batches of 1) falls
    short at the end, after every record read; the error names the manifest."""
    d = make_dataset(tmp_path, "intact")
    a = os.path.join(d, "a.tfrecords")
    manifest = listing(d, sizes=True)
    input_fn = batchloaders.build_input_fn(config(d, "independent", False, "fail"))
    room = AT[RECORDS] - AT[4] - 16
    padded = next(p for p in (record(A, 4, pad=("string", [b"p" * n])) for n in range(room)) if len(p) == room)
    write(a, framed(GOOD[:4] + [padded]))
    assert os.path.getsize(a) == AT[RECORDS]
    codes, error = delivered(input_fn)
    assert codes == a_codes(5) + B_CODES
    problem = error.problems[0]
    assert (problem.file, problem.path) == (manifest, "$.files")
    assert problem.message.startswith("the data gave 11 batches, fewer than the 12 the record counts")


def test_damage_is_placed_in_the_file_failing_at_the_byte_tensorflow_names(tmp_path):
    """Pipeline 1 of 2 reads b.tfrecords (sharded by file), damaged at its record 1; a.tfrecords, pipeline 0's,
    is damaged too (record 3), or is gone: the error names b, where TensorFlow's reader failed."""
    d = make_dataset(tmp_path, "flipped byte in payload")
    b = os.path.join(d, "b.tfrecords")
    other = [record(B, r) for r in range(RECORDS)]
    write(b, flip(framed(other), frame_offsets(other)[1] + 12 + 4))
    listing(d, sizes=True)
    input_fn = batchloaders.build_input_fn(config(d, "independent", False, "fail"))
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=1)
    for a_then in ("damaged at record 3", "gone"):
        if a_then == "gone":
            os.remove(os.path.join(d, "a.tfrecords"))
        codes, error = delivered(lambda: input_fn(context))
        assert codes == [], a_then  # the damaged block holds b's every record
        problem = error.problems[0]
        assert (problem.file, problem.path) == (b, f"batchloaders data error at byte {frame_offsets(other)[1]}, "
                                                   "after record 0 (the last good one; records count from 0)"), a_then


def test_the_search_for_damage_stops_at_its_time_limit_inside_a_file(tmp_path):
    d = make_dataset(tmp_path, "flipped byte in payload")
    listing(d, sizes=True)
    locator = batchloaders.build_input_fn(config(d, "independent", False, "fail"))._locator  # noqa: SLF001
    a = os.path.join(d, "a.tfrecords")
    assert locator.damaged(AT[BAD] + 12) == (a, BAD, AT[BAD], True)
    assert locator.damaged(AT[BAD] + 12, seconds=1e-4) is None  # past the limit at its first record


def _reader_error(path: str) -> tf.errors.OpError:
    """What TensorFlow's reader raises on ``path`` (a user's own tf.data pipeline reading it)."""
    try:
        list(tf.data.TFRecordDataset(path))
    except tf.errors.OpError as error:
        return error
    raise AssertionError(f"{path} read without an error")


def test_a_reader_error_is_placed_only_for_pipelines_read_without_the_accounting(tmp_path):
    """A DataLossError of a user's own TFRecordDataset (over a file of no config) stays TensorFlow's when no
    pipeline reads on the proven path; with one that does, its files are searched (intact: not found)."""
    damaged = os.path.join(make_dataset(tmp_path / "theirs", "flipped byte in payload"), "a.tfrecords")
    error = _reader_error(damaged)
    assert type(error).__name__ == "DataLossError" and f"corrupted record at {AT[BAD] + 12}" in error.message
    ours = make_dataset(tmp_path / "ours", "intact")
    listing(ours, sizes=False)
    accounted = batchloaders.build_input_fn(config(ours, "independent", False, "fail"))._locator  # noqa: SLF001
    assert data_error_from(error, [accounted]) is None
    listing(ours, sizes=True)
    proven = batchloaders.build_input_fn(config(ours, "independent", False, "fail"))._locator  # noqa: SLF001
    problem, = data_error_from(error, [accounted, proven]).problems
    assert (problem.file, problem.path) == ("<a data file>", "record")


def test_a_file_of_its_listed_size_that_cannot_be_read_is_an_open_error(tmp_path):
    """The probe cannot read a path of the listed size (a directory here, which root cannot read either):
    the reader's own error, naming it, not "lists N bytes, but it is N bytes"."""
    unreadable = tmp_path / "a.tfrecords"
    unreadable.mkdir()
    listed = os.stat(unreadable).st_size
    assert listed > 0
    probe = size_probe(tf.constant(str(unreadable)), tf.constant(listed, tf.int64), OPENED)
    with pytest.raises(tf.errors.FailedPreconditionError) as raised:
        list(probe)
    problem, = data_error_from(raised.value, []).problems
    assert (problem.file, problem.path) == (str(unreadable), "open")
    assert problem.message.startswith("the data file cannot be opened: Is a directory")


def test_a_state_checkpoint_of_the_accounting_path_names_the_read_path(tmp_path, monkeypatch):
    """A checkpoint saved with the files read with the accounting (as every version before the proven path
    did) restored into the same config read on the proven path: a ResumeError names the way of reading."""
    from batchloaders.read import integrity, proven

    d = make_dataset(tmp_path, "intact")
    listing(d, sizes=True)
    cfg = config(d, "independent", False, "fail")
    with monkeypatch.context() as earlier:
        earlier.setattr(integrity, "listed_sizes", lambda config: None)
        earlier.setattr(proven, "listed_sizes", lambda config: None)
        saving = batchloaders.ResumableIterator(batchloaders.build_input_fn(cfg), mode="state")
        next(saving)
        path = tf.train.Checkpoint(iterator=saving).save(str(tmp_path / "ckpt"))
    restoring = batchloaders.ResumableIterator(batchloaders.build_input_fn(cfg), mode="state")
    tf.train.Checkpoint(iterator=restoring).restore(path)
    with pytest.raises(batchloaders.ResumeError) as raised:
        next(restoring)
    message = str(raised.value)
    assert "whose read differ(s) from this one's" in message
    assert "read: saved accounted, now proven: the pipeline reads the data files another way" in message


def test_the_proven_path_builds_no_accounting_scan(tmp_path):
    d = make_dataset(tmp_path, "intact")
    listing(d, sizes=True)
    proven = batchloaders.build_input_fn(config(d, "independent", False, "fail"))
    counted = batchloaders.build_input_fn(config(d, "independent", False, "skip_file"))
    assert proven._reader.listed is not None and counted._reader.listed is None  # noqa: SLF001
    assert scans(proven()) == 0 and scans(counted()) > 0
