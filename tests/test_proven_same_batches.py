"""The proven read path (read/proven.py: sizes listed, no accounting scan) gives the batches of the accounting path.

The same records under two manifests, one listing every file's size (proven) and one only the counts
(accounted), read by each loader shuffled, by two input pipelines, and resumed mid-epoch. Record r of file f
holds x = [c, c] with c = 100 * f + r (test_corruption.py's records).
"""
from __future__ import annotations

import json
import os

import pytest
import tensorflow as tf

import batchloaders
from conftest import resumed_ids, write_records
from test_corruption import config, make_dataset, record

FILES, PER_FILE = 3, 30
SHUFFLED = dict(shuffle=True, num_shuffle_buffer_elements=6, num_filenames_shuffle_buffer=3, num_mix_files=2,
                seed=7, target_batch_size=4, num_parallel_reads=2)


def dataset(root, *, sizes: bool) -> str:
    d = make_dataset(root, "intact")
    for name in os.listdir(d):
        if name.endswith(".tfrecords"):
            os.remove(os.path.join(d, name))
    names = [f"part-{f}.tfrecords" for f in range(1, FILES + 1)]
    for f, name in enumerate(names, 1):
        write_records(os.path.join(d, name), [record(f, r) for r in range(PER_FILE)])
    path = os.path.join(d, "__manifest__.json")
    with open(path) as fh:
        manifest = json.load(fh)
    manifest["files"] = [{"name": n, "num_records": PER_FILE,
                          **({"size_bytes": os.path.getsize(os.path.join(d, n))} if sizes else {})} for n in names]
    with open(path, "w") as fh:
        json.dump(manifest, fh)
    return d


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("paths")
    return {way: dataset(root / way, sizes=way == "proven") for way in ("proven", "accounted")}


def build(d: str, loader: str):
    cfg = config(d, loader, True, "fail")
    cfg["args"].update(SHUFFLED)
    input_fn = batchloaders.build_input_fn(cfg)
    return input_fn, cfg


def xs(dataset) -> list:
    return [b["x"].numpy().tolist() for b in dataset]


def whole(d, loader, tmp_path):
    return [xs(build(d, loader)[0]())]


def sharded(d, loader, tmp_path):
    input_fn = build(d, loader)[0]
    return [xs(input_fn(tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=i,
                                                   num_replicas_in_sync=2))) for i in range(2)]


def resumed(d, loader, tmp_path):
    """The whole run, and the run checkpointed (state) after 3 batches and restored into a new input_fn."""
    checkpoints = tmp_path / os.path.basename(os.path.dirname(d))
    checkpoints.mkdir()
    return list(resumed_ids(build(d, loader)[1], checkpoints, stop=3, tensor="x"))


CASES = {  # name -> (loader, what is compared)
    "independent": ("independent", whole),
    "continuous_sequence": ("continuous_sequence", whole),
    "discrete_sequence": ("discrete_sequence", whole),
    "2 input pipelines": ("independent", sharded),
    "resumed mid-epoch": ("discrete_sequence", resumed),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_proven_path_gives_the_accounting_paths_batches(dirs, tmp_path, case):
    loader, batches = CASES[case]
    assert build(dirs["proven"], loader)[0]._reader.listed is not None  # noqa: SLF001
    assert build(dirs["accounted"], loader)[0]._reader.listed is None  # noqa: SLF001
    proven, accounted = (batches(dirs[way], loader, tmp_path) for way in ("proven", "accounted"))
    assert proven == accounted
    assert all(proven)  # every run gave batches
    if case == "resumed mid-epoch":  # the restored run goes on as the whole one
        assert proven[1] == proven[0]
    if case == "independent":  # every record once, shuffled
        codes = [x[0] for b in proven[0] for x in b]
        assert sorted(codes) == [100 * f + r for f in range(1, FILES + 1) for r in range(PER_FILE)]
        assert codes != sorted(codes)
