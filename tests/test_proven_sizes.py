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
from conftest import frame_offsets, write_records
from test_corruption import A, AT, B_CODES, BAD, GOOD, RECORDS, a_codes, config, flip, framed, make_dataset, record, run


def listing(d: str, *, sizes: bool) -> str:
    """The manifest of ``d`` lists each file's count, and its size when ``sizes``."""
    path = os.path.join(d, "__manifest__.json")
    with open(path) as f:
        manifest = json.load(f)
    manifest["files"] = [{"name": n, "num_records": RECORDS, **({"size_bytes": os.path.getsize(os.path.join(d, n))}
                                                                 if sizes else {})} for n in ("a.tfrecords", "b.tfrecords")]
    with open(path, "w") as f:
        json.dump(manifest, f)
    return path


def cut(path: str, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


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


LONG = 6000  # six blocks of 1,024 records: the run reads the first ones before the file is cut
DURING = {  # where A is cut after the run's first batch -> (A's records delivered, what the error says)
    # Only the independent loader's declared number of batches (the manifest's counts) sees it, at the end.
    "at a record boundary": (lambda at: at[5000], 5000, "the data gave 50 batches, fewer than the 60"),
    "inside a payload": (lambda at: at[5000] + 14, 4000, "after record 4999"),  # whole batches before its block
}


@pytest.mark.parametrize("where", list(DURING))
def test_a_file_cut_while_the_run_reads_it(tmp_path, where):
    """What docs/damaged-data.md says: inside a record, TensorFlow's reader fails, located; at a record
    boundary (or inside a header) nothing sees it on this path, and the records after the cut are lost."""
    d = make_dataset(tmp_path, "intact")
    os.remove(os.path.join(d, "b.tfrecords"))
    records = [record(0, i) for i in range(LONG)]
    a = write_records(os.path.join(d, "a.tfrecords"), records)
    with open(os.path.join(d, "__manifest__.json")) as f:
        manifest = json.load(f)
    manifest["files"] = [{"name": "a.tfrecords", "num_records": LONG, "size_bytes": os.path.getsize(a)}]
    with open(os.path.join(d, "__manifest__.json"), "w") as f:
        json.dump(manifest, f)
    cfg = config(d, "independent", False, "fail")
    cfg["args"]["target_batch_size"] = 100
    at, delivered, says = DURING[where]
    codes, error = [], None
    try:
        with batchloaders.data_errors():
            for batch in batchloaders.build_input_fn(cfg)():
                if not codes:
                    cut(a, at(frame_offsets(records)))
                codes += batch["x"].numpy().reshape(-1, 2)[:, 0].tolist()
    except batchloaders.DataError as e:
        error = e
    assert codes == list(range(delivered))
    problem = error.problems[0]
    if where == "at a record boundary":
        assert (problem.file, problem.path) == ("<the manifest>", "$.files") and says in problem.message
    else:
        assert problem.file == a and says in problem.path


def test_the_proven_path_builds_no_accounting_scan(tmp_path):
    d = make_dataset(tmp_path, "intact")
    listing(d, sizes=True)
    proven = batchloaders.build_input_fn(config(d, "independent", False, "fail"))
    counted = batchloaders.build_input_fn(config(d, "independent", False, "skip_file"))
    assert proven._reader.listed is not None and counted._reader.listed is None  # noqa: SLF001
    assert scans(proven()) == 0 and scans(counted()) > 0
