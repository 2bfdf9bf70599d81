"""Fixture writers: tiny real TFRecord datasets whose values say where they came from."""
from __future__ import annotations

import gc
import json
import os

import pytest


def tf_feature(kind: str, values):
    import tensorflow as tf

    values = list(values)
    if kind == "int":
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    if kind == "float":
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode() if isinstance(v, str) else v
                                                                  for v in values]))


def example(**features) -> bytes:
    """example(x=("float", [1.0, 2.0]), label=("int", [3])) -> serialized tf.train.Example."""
    import tensorflow as tf

    return tf.train.Example(features=tf.train.Features(
        feature={k: tf_feature(*v) for k, v in features.items()})).SerializeToString()


def sequence_example(context: dict, lists: dict) -> bytes:
    """context: {name: (kind, values)}; lists: {name: (kind, [values per step])}."""
    import tensorflow as tf

    return tf.train.SequenceExample(
        context=tf.train.Features(feature={k: tf_feature(*v) for k, v in context.items()}),
        feature_lists=tf.train.FeatureLists(feature_list={
            k: tf.train.FeatureList(feature=[tf_feature(kind, step) for step in steps])
            for k, (kind, steps) in lists.items()})).SerializeToString()


def write_records(path, records, compression=None) -> str:
    import tensorflow as tf

    if "://" in str(path):  # (os.makedirs would make a local "ram:" folder)
        tf.io.gfile.makedirs(str(path).rsplit("/", 1)[0])
    else:
        os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    options = tf.io.TFRecordOptions(compression_type={None: "", "zlib": "ZLIB", "gzip": "GZIP"}[compression])
    with tf.io.TFRecordWriter(str(path), options) as w:
        for r in records:
            w.write(r)
    return str(path)


def frame_offsets(records: list[bytes]) -> list[int]:
    """Where each record's TFRecord frame begins in an uncompressed file, then where the file ends."""
    out = [0]
    for r in records:
        out.append(out[-1] + len(r) + 16)  # length (8), its CRC (4), payload, payload CRC (4)
    return out


def flip_byte(data: bytes, at: int, mask: int = 0x01) -> bytes:
    """``data`` with the byte at ``at`` XOR-ed with ``mask``."""
    return data[:at] + bytes([data[at] ^ mask]) + data[at + 1:]


def write_manifest(directory, features, *, allow_var_len=False, compression=None) -> str:
    os.makedirs(str(directory), exist_ok=True)
    path = os.path.join(str(directory), "__manifest__.json")
    with open(path, "w") as f:
        json.dump({"compression": compression, "allow_var_len": allow_var_len, "features": features}, f)
    return path


def feature(name, dtype, shape, kind, var_len=None, **args):
    out = {"name": name, "dtype": dtype, "shape": list(shape), "deserialize_type": kind}
    if var_len is not None:
        out["var_len"] = var_len
    if args:
        out["deserialize_args"] = args
    return out


def loader_config(data_dir, primary, *, inputs, targets=(), loader="independent", **args) -> dict:
    """A dict config with the spec's required arguments filled in; ``args`` override them."""
    base = {"dataset": {"type": "dir", "args": {"data_dir": str(data_dir)}}, "target_batch_size": 2,
            "drop_remainder": False, "epochs": 1, "num_read_buffer_bytes": 0, "num_prefetch": 0,
            "primary_features": [{"from_name": f, "to_name": t} for f, t in primary]}
    base.update(args)
    return {"type": loader, "model": {"inputs": list(inputs), "targets": list(targets)}, "args": base}


def collect(dataset, limit=10_000):
    """Every element of a dataset as numpy (dicts of arrays, or (features, targets) tuples)."""
    import tensorflow as tf

    return list(dataset.take(limit).as_numpy_iterator())


def resumed_ids(cfg: dict, checkpoint_dir, stop: int, tensor: str = "id") -> tuple[list, list]:
    """(``tensor``'s batches of a whole run, the same run with a ResumableIterator checkpointed after ``stop``
    batches and restored into a new input_fn): a config that resumes exactly gives the two equal."""
    import tensorflow as tf
    from batchloaders import ResumableIterator, build_input_fn

    fn = build_input_fn(cfg)
    whole = [b[tensor].numpy().tolist() for b in ResumableIterator(fn)]
    first = ResumableIterator(fn)
    given = [next(first)[tensor].numpy().tolist() for _ in range(stop)]
    path = tf.train.Checkpoint(iterator=first).save(str(checkpoint_dir / "ckpt"))
    again = ResumableIterator(build_input_fn(cfg))
    tf.train.Checkpoint(iterator=again).restore(path)
    return whole, given + [b[tensor].numpy().tolist() for b in again]


@pytest.fixture
def doubled_batcher():
    """A batcher ``doubled`` (each batch of examples times 2) registered for one test, then unregistered."""
    import batchloaders
    from batchloaders.transform.builtin_types import load as load_builtin_types
    from batchloaders.transform.registry import BATCHERS

    load_builtin_types()
    saved = BATCHERS.snapshot()

    @batchloaders.register_batcher("doubled")
    def doubled(examples):
        return examples * 2
    yield "doubled"
    BATCHERS.restore(saved)


@pytest.fixture
def numbered_dataset(tmp_path):
    """3 files x 4 records of Examples; record r of file f holds id = 100*f + r and x = [id, id + 0.5]."""
    d = tmp_path / "numbered"
    write_manifest(d, [feature("id", "int64", [], "int"), feature("x", "float32", [2], "float")])
    for f in range(3):
        write_records(d / f"part-{f}.tfrecords",
                      [example(id=("int", [100 * f + r]), x=("float", [100 * f + r, 100 * f + r + 0.5]))
                       for r in range(4)])
    return d


@pytest.fixture(scope="session")
def warm_python():
    """Runs programs as ``python -c`` would, TensorFlow imported beforehand (tests/warm.py)."""
    from warm import shared

    return shared()


# CPU seconds of the costliest test files, their processes included (a whole run with
# BATCHLOADERS_TEST_CPU=<dir>, summed by tools/test_cpu.py; CPU, unlike wall time, does not grow with the
# load of the machine), costliest first. They are marked ``slow``: `make check` leaves them out and runs the
# rest, about a tenth of the suite's CPU (105 of 1,128 CPU seconds, start-up aside). pytest-xdist hands out whole files (`--dist loadfile`) in the order
# collected (`--no-loadscope-reorder`, Makefile): these go first, so that no worker runs a long file alone at
# the end. A file missing here runs after them, in the usual order, and in `make check`.
COSTLIEST = {"test_resume": 70.7, "test_readme_blocks": 64.6, "test_corruption": 62.8, "test_sharding": 48.5,
             "test_trust_global_reads": 36.3, "test_fuzz": 36.1, "test_service": 31.3,
             "test_describe_json": 30.6, "test_mixture_records": 30.1, "test_prepare_beam": 27.8,
             "test_segmenting": 26.4, "test_short_files": 25.7, "test_preview": 21.7, "test_plugins": 21.1,
             "test_bucketing": 20.9, "test_same_batches": 19.7, "test_trust_keras": 19.5,
             "test_describe_bench": 18.2, "test_examples": 16.6, "test_steps_sequence": 16.0,
             "test_plugin_trust": 15.8, "test_as_written": 15.3, "test_chunking": 14.2,
             "test_reshard_trust": 14.2, "test_shard_cache": 13.2, "test_independent": 12.7,
             "test_quiet_and_messages": 12.4, "test_backends": 12.2, "test_mixture": 11.3,
             "test_trust_config_values": 11.1, "test_decode_image": 11.1, "test_no_python_callbacks": 10.9,
             "test_editor_ci": 10.2, "test_resume_trust": 9.8, "test_damage_fuzz": 9.6,
             "test_steps_values": 9.5, "test_slice_step": 9.5, "test_mixture_stratified": 9.3,
             "test_continuous_sequence": 9.0, "test_numpy_iterator": 8.8, "test_bench_stages": 8.8,
             "test_cache_shuffle": 8.6, "test_packing_groups": 8.4, "test_record_errors": 8.1,
             "test_global_shuffle_windows": 7.7, "test_hardening": 7.6, "test_packing": 7.4,
             "test_data_tools": 7.3, "test_reshard": 7.1, "test_segment_keys": 7.1,
             "test_trust_resume_defaults": 6.9, "test_readme_plugins": 6.6, "test_tuning_graph": 6.0,
             "test_batching_policies": 6.0, "test_tensorflow_log": 5.5}


_CPU_COST = pytest.StashKey()


def pytest_configure(config):
    """Grappler's meta optimizer off for the functions the tests' pipelines instantiate: about two thirds of
    every iterator's creation (docs/decisions/test-suite.md). It rewrites graphs without changing what they
    compute; ``BATCHLOADERS_TEST_GRAPPLER=1`` runs the suite with TensorFlow's default instead, and
    ``make bench`` checks whole epochs of ours, with it, against pipelines written by hand."""
    if os.environ.get("BATCHLOADERS_TEST_GRAPPLER") != "1":
        import tensorflow as tf

        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    if os.environ.get("BATCHLOADERS_TEST_CPU"):
        from cpu_cost import CpuCost

        controller = not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))
        config.stash[_CPU_COST] = CpuCost(os.environ["BATCHLOADERS_TEST_CPU"], children=not controller)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With ``BATCHLOADERS_TEST_CPU=<dir>``: the CPU seconds of each test file, its processes included
    (tests/cpu_cost.py, tools/test_cpu.py)."""
    yield
    cost = item.config.stash.get(_CPU_COST, None)
    if cost is not None:
        cost.add(item.path.name, item.nodeid)


def pytest_collection_finish(session):
    """What importing TensorFlow, Keras and the test modules made is kept out of the garbage collector's walks
    (``gc.freeze``): a few hundred thousand objects that live until the process ends, walked again by every
    full collection, and tests/test_resume.py collects after each test. With ``BATCHLOADERS_TEST_CPU=<dir>``:
    start-up and collection counted as their own line."""
    gc.collect()
    gc.freeze()
    cost = session.config.stash.get(_CPU_COST, None)
    if cost is not None:
        cost.add("(start-up and collection)")


def pytest_unconfigure(config):
    cost = config.stash.get(_CPU_COST, None)
    if cost is not None:
        cost.write()


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        if item.path.stem in COSTLIEST:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: -COSTLIEST.get(item.path.stem, 0.0))  # stable: order within a file kept
