"""A record that disagrees with the manifest is a DataError naming the file, the record's index in the file,
the feature (stored name and tensor name), what the manifest says and what was found.

Every dataset has 2 files of 10 records; record 7 of part-1 is the bad one. Each case is read by each loader
(serial and parallel reading alternating), from ``next()`` on the dataset (no ``data_errors()``), and the
message is checked word for word.
"""
from __future__ import annotations

import pytest
import tensorflow as tf

import batchloaders
from batchloaders.errors import DataError
from conftest import example, feature, loader_config, sequence_example, write_manifest, write_records

BAD_FILE, BAD_RECORD = 1, 7


def _example_records(f, bad):
    out = []
    for r in range(10):
        v = 100 * f + r
        fields = {"x": ("float", [v, v + 0.5, v + 0.25]), "rid": ("int", [v])}
        if (f, r) == (BAD_FILE, BAD_RECORD):
            fields = bad(fields, v)
        out.append(example(**fields))
    return out


def _sequence_records(f, bad):
    out = []
    for r in range(10):
        v = 100 * f + r
        context, lists = {"rid": ("int", [v])}, {"x": ("float", [[v, -v], [v + 0.5, -v]])}
        if (f, r) == (BAD_FILE, BAD_RECORD):
            context, lists = bad(context, lists, v)
        out.append(sequence_example(context, lists))
    return out


def _example_manifest(d):
    write_manifest(d, [feature("x", "float32", [3], "float"), feature("rid", "int64", [], "int")])


def _sequence_manifest(d):
    write_manifest(d, [feature("x", "float32", [2], "float", var_len=True),
                       feature("rid", "int64", [], "int", var_len=False)], allow_var_len=True)


# name: (manifest writer, records of file f, the words the error must have after "feature 'x' ...")
CASES = {
    "example_count": (_example_manifest, lambda f: _example_records(
        f, lambda fields, v: {**fields, "x": ("float", [v, v, v, v])}),
        "the manifest says float (float_list) of shape [3] (3 values), found a float_list of 4 values"),
    "example_missing": (_example_manifest, lambda f: _example_records(
        f, lambda fields, v: {"rid": fields["rid"], "y": fields["x"]}),
        "the manifest says float (float_list) of shape [3] (3 values), found no such feature"),
    "example_type": (_example_manifest, lambda f: _example_records(
        f, lambda fields, v: {**fields, "x": ("int", [v, v, v])}),
        "the manifest says float (float_list) of shape [3] (3 values), found an int64_list of 3 values"),
    "sequence_step_count": (_sequence_manifest, lambda f: _sequence_records(
        f, lambda context, lists, v: (context, {"x": ("float", [[v, -v], [v, v, v]])})),
        "the manifest says a feature list whose every step holds float (float_list) of shape [2] (2 values), "
        "found at step 1 a float_list of 3 values"),
    "sequence_missing_list": (_sequence_manifest, lambda f: _sequence_records(
        f, lambda context, lists, v: (context, {"y": lists["x"]})),
        "the manifest says a feature list whose every step holds float (float_list) of shape [2] (2 values), "
        "found no such feature list"),
}

# loader: the config arguments it needs beyond loader_config's
LOADERS = {
    "independent": {},
    "discrete_sequence": {"min_window": 2, "max_window": 2},
    "continuous_sequence": {"min_window": 2, "max_window": 2},
}


def _dataset(tmp_path, case):
    manifest, records, _ = CASES[case]
    d = tmp_path / case
    manifest(d)
    for f in range(2):
        write_records(d / f"part-{f}.tfrecords", records(f))
    return d


# Each (case, loader) once, serial and parallel reading alternating: every case and every loader meets both.
MATRIX = [(case, loader, (i + j) % 2 == 1) for i, case in enumerate(sorted(CASES))
          for j, loader in enumerate(sorted(LOADERS))
          if not (loader == "continuous_sequence" and case.startswith("sequence"))]  # it joins Examples' steps


@pytest.mark.parametrize("case, loader, parallel", MATRIX,
                         ids=[f"{c}-{l}-{'parallel' if p else 'serial'}" for c, l, p in MATRIX])
def test_bad_record_is_located(tmp_path, case, loader, parallel):
    d = _dataset(tmp_path, case)
    # continuous windows join records along their first axis: a scalar per record has none
    primary = [("x", "feats")] + ([("rid", "rid")] if loader != "continuous_sequence" else [])
    config = loader_config(d, primary, inputs=[t for _, t in primary], loader=loader,
                           padding=True, num_parallel_reads=2 if parallel else 1, **LOADERS[loader])
    input_fn = batchloaders.build_input_fn(config)
    with pytest.raises(DataError) as caught:
        for _ in input_fn():
            pass
    problem, = caught.value.problems
    assert problem.file == str(d / f"part-{BAD_FILE}.tfrecords")
    assert problem.path == f"record {BAD_RECORD}"
    assert problem.message == f"feature 'x' (read as 'feats'): {CASES[case][2]}".replace(
        "the manifest says", f"the manifest {d / '__manifest__.json'} says")
    assert "{{function_node" not in str(caught.value)
    assert isinstance(caught.value.__cause__, tf.errors.OpError)
    # still TensorFlow's error class for code that catches it, with the located text as its message
    assert isinstance(caught.value, type(caught.value.__cause__)) and caught.value.message == str(caught.value)
    import pickle

    assert pickle.loads(pickle.dumps(caught.value)).problems == caught.value.problems  # to another process


def test_sequence_examples_read_as_examples(tmp_path):
    """A manifest that says Example (allow_var_len false) over SequenceExample files names the record type."""
    d = tmp_path / "seq_as_example"
    write_manifest(d, [feature("x", "float32", [1], "float")])
    write_records(d / "part-0.tfrecords", [sequence_example({}, {"x": ("float", [[r]])}) for r in range(4)])
    input_fn = batchloaders.build_input_fn(loader_config(d, [("x", "x")], inputs=["x"]))
    with pytest.raises(DataError) as caught:
        next(iter(input_fn()))
    problem, = caught.value.problems
    assert (problem.file, problem.path) == (str(d / "part-0.tfrecords"), "record 0")
    assert problem.message.startswith("holds feature lists ('x'), so it is a tf.train.SequenceExample, but the "
                                      f"manifest {d / '__manifest__.json'} says allow_var_len false")


def test_data_errors_locates_inside_a_function(tmp_path):
    """Where TensorFlow raises from a tf.function (as Keras fit's step does), data_errors() converts and
    locates the same error."""
    d = _dataset(tmp_path, "sequence_step_count")
    config = loader_config(d, [("x", "feats"), ("rid", "rid")], inputs=["feats", "rid"], padding=True)
    dataset = batchloaders.build_input_fn(config)()

    @tf.function
    def total(iterator):
        out = tf.constant(0.0)
        for batch in iterator:
            out += tf.reduce_sum(batch["feats"])
        return out

    with pytest.raises(DataError) as caught:
        with batchloaders.data_errors():
            total(iter(dataset))
    problem, = caught.value.problems
    assert (problem.file, problem.path) == (str(d / "part-1.tfrecords"), "record 7")
    assert problem.message == f"feature 'x' (read as 'feats'): {CASES['sequence_step_count'][2]}".replace(
        "the manifest says", f"the manifest {d / '__manifest__.json'} says")


def test_good_data_is_unchanged(tmp_path):
    """The wrapper that locates errors passes the batches through as they are."""
    d = tmp_path / "good"
    _example_manifest(d)
    write_records(d / "part-0.tfrecords", [example(x=("float", [r, r + 0.5, r + 0.25]), rid=("int", [r]))
                                           for r in range(5)])
    input_fn = batchloaders.build_input_fn(loader_config(d, [("x", "x"), ("rid", "rid")], inputs=["x", "rid"],
                                                         target_batch_size=2))
    assert [b["rid"].tolist() for b in input_fn().as_numpy_iterator()] == [[0, 1], [2, 3], [4]]
    assert [b["rid"].numpy().tolist() for b in input_fn()] == [[0, 1], [2, 3], [4]]


def test_keras_fit_under_data_errors(tmp_path):
    """Keras fit runs its steps in a tf.function: data_errors() around it gives the same located error."""
    import keras

    d = _dataset(tmp_path, "sequence_step_count")
    config = loader_config(d, [("x", "feats"), ("rid", "rid")], inputs=["feats"], targets=["rid"], padding=True)
    frames = keras.Input(shape=(None, 2), name="feats")
    model = keras.Model(frames, keras.layers.Dense(1, name="rid")(keras.layers.GlobalAveragePooling1D()(frames)))
    model.compile("sgd", "mse")
    input_fn = batchloaders.build_input_fn(config, model=model)
    with pytest.raises(DataError) as caught:
        with batchloaders.data_errors():
            model.fit(input_fn(), epochs=1, verbose=0, shuffle=False)
    problem, = caught.value.problems
    assert (problem.file, problem.path) == (str(d / "part-1.tfrecords"), "record 7")
    assert problem.message == f"feature 'x' (read as 'feats'): {CASES['sequence_step_count'][2]}".replace(
        "the manifest says", f"the manifest {d / '__manifest__.json'} says")


@pytest.mark.parametrize("on_corrupt", ["fail", "skip_file"])
@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_records_beyond_the_manifests_count(tmp_path, loader, on_corrupt):
    """A file holding more records than the manifest lists (10 listed, 12 held) is an error naming the file,
    under either policy: never delivered past the count, never skipped, never counted negatively."""
    import json

    d = _dataset(tmp_path, "example_count")
    write_records(d / "part-1.tfrecords", [example(x=("float", [v, v + 0.5, v + 0.25]), rid=("int", [v]))
                                          for v in range(100, 112)])
    manifest = json.loads((d / "__manifest__.json").read_text())
    manifest["files"] = [{"name": f"part-{f}.tfrecords", "num_records": 10} for f in range(2)]
    (d / "__manifest__.json").write_text(json.dumps(manifest))
    primary = [("x", "feats")] + ([("rid", "rid")] if loader != "continuous_sequence" else [])
    config = loader_config(d, primary, inputs=[t for _, t in primary], loader=loader, on_corrupt=on_corrupt,
                           num_parallel_reads=1, **LOADERS[loader])
    with pytest.raises(DataError) as caught:
        for _ in batchloaders.build_input_fn(config)():
            pass
    problem, = caught.value.problems
    assert (problem.file, problem.path) == (str(d / "part-1.tfrecords"), "record 10")
    assert problem.message == (f"the manifest {d / '__manifest__.json'} lists 10 records for this file, but it holds "
                               "more (records were added after the manifest was written: `batchloaders manifest DIR` "
                               "writes it again)")


NARROW = [  # (manifest dtype, stored kind, the bad record's values, the value named, what the dtype holds)
    ("int32", "int", [2**40 + 107, -2**40, 2**31], "1099511627883", "-2147483648 to 2147483647"),
    ("uint8", "int", [1, -1, 2], "-1", "0 to 255"),
    ("float16", "float", [1.0, 1e6, 2.0], "1000000", "-65504.0 to 65504.0"),
]


@pytest.mark.parametrize("dtype, kind, values, named, holds", NARROW, ids=[r[0] for r in NARROW])
def test_values_the_manifests_dtype_cannot_hold(tmp_path, dtype, kind, values, named, holds):
    """int64 data read as int32 arrived wrapped ([0, 0, -2147483648] for these), and check-data said OK."""
    from batchloaders.cli import check_data

    d = tmp_path / dtype
    write_manifest(d, [feature("v", dtype, [3], kind)])
    write_records(d / "part-0.tfrecords", [example(v=(kind, values if r == BAD_RECORD else [r, r, r]))
                                           for r in range(10)])
    input_fn = batchloaders.build_input_fn(loader_config(d, [("v", "v")], inputs=["v"]))
    with pytest.raises(DataError) as caught:
        for _ in input_fn():
            pass
    problem, = caught.value.problems
    assert (problem.file, problem.path) == (str(d / "part-0.tfrecords"), f"record {BAD_RECORD}")
    assert problem.message.startswith(f"feature 'v' holds {named}")
    assert f"which the manifest's dtype {dtype} cannot hold (values from {holds};" in problem.message
    manifest = batchloaders.load_manifest(str(d / "__manifest__.json"))
    _, said = check_data.check_file(str(d / "part-0.tfrecords"), manifest, records=10)
    shown = repr(float(named) if kind == "float" else int(named))
    assert said == [f"record {BAD_RECORD}: feature 'v': the manifest says dtype {dtype}, found the value {shown}, "
                    f"which {dtype} cannot hold"]


def test_a_cast_step_that_would_wrap_a_value_names_the_step(tmp_path):
    d = tmp_path / "cast"
    write_manifest(d, [feature("x", "float32", [2], "float")])
    write_records(d / "part-0.tfrecords", [example(x=("float", [r, 3e9 if r == 3 else r])) for r in range(5)])
    config = loader_config(d, [("x", "x")], inputs=["x"],
                           processing_steps=[{"tensor": "x", "type": "cast", "args": {"dtype": "int32"}}])
    with pytest.raises(DataError) as caught:
        for _ in batchloaders.build_input_fn(config)():
            pass
    problem, = caught.value.problems
    assert (problem.file, problem.path) == ("<dict>", "$.args.processing_steps[0]")
    assert problem.message == "the cast to int32 found the value 3e+09, which int32 cannot hold (out_of_range: " \
                              "saturate clamps)"
    config["args"]["processing_steps"][0]["args"]["out_of_range"] = "saturate"
    got = [b["x"].tolist() for b in batchloaders.build_input_fn(config)().as_numpy_iterator()]
    assert got == [[[0, 0], [1, 1]], [[2, 2], [3, 2**31 - 128]], [[4, 4]]]


def test_values_at_the_edge_of_the_manifests_dtype_pass_as_they_are(tmp_path):
    """The range check is exact, and int64 read as uint64 (how unsigned ids and hashes are stored) is the
    bit-cast it always was."""
    d = tmp_path / "edges"
    write_manifest(d, [feature("i", "int32", [2], "int"), feature("u", "uint64", [2], "int"),
                       feature("h", "float16", [2], "float")])
    write_records(d / "part-0.tfrecords", [example(i=("int", [2**31 - 1, -2**31]), u=("int", [-1, 2**63 - 1]),
                                                   h=("float", [65504.0, -65504.0]))])
    batch, = batchloaders.build_input_fn(loader_config(d, [("i", "i"), ("u", "u"), ("h", "h")],
                                                       inputs=["i", "u", "h"]))().as_numpy_iterator()
    assert batch["i"].tolist() == [[2**31 - 1, -2**31]]
    assert batch["u"].tolist() == [[2**64 - 1, 2**63 - 1]]
    assert batch["h"].tolist() == [[65504.0, -65504.0]]
