"""A mixture whose sources store their features alike draws serialized records, then parses each block once
(loaders/mixture.py, ``parses_alike``): the same batches, in the same order, as drawing parsed examples.

Fixed-size data: source s, file f, record r holds id = 10000 * s + 100 * f + r (s = 0: files of 6 and 4
records; s = 1: files of 9, 0 and 11; s = 2: one file of 5), every source naming the feature "id".
Feature lists: source s, file f, record r holds 2 + (r % 4) steps; step j's frame is
[10000 * s + 100 * f + r, j] and its label 10 * r + j.
"""
from __future__ import annotations

import collections
import copy

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import DataError, build_input_fn, load_config
from batchloaders.cli.main import main
from batchloaders.loaders import mixture, registry
from conftest import resumed_ids, example, feature, loader_config, sequence_example, write_manifest, write_records

FILES = ((6, 4), (9, 0, 11), (5,))


def ident(s: int, f: int, r: int) -> int:
    return 10000 * s + 100 * f + r


def manifested(d) -> None:
    with pytest.raises(SystemExit):
        main(["manifest", str(d)])  # record counts, for weights by size and the cardinality


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    base = tmp_path_factory.mktemp("alike")
    for s, sizes in enumerate(FILES):
        d = base / f"ids{s}"
        write_manifest(d, [feature("id", "int64", [], "int")])
        for f, n in enumerate(sizes):
            write_records(d / f"part-{f}.tfrecords", [example(id=("int", [ident(s, f, r)])) for r in range(n)])
        manifested(d)
        d = base / f"frames{s}"
        write_manifest(d, [feature("frames", "float32", [2], "float", var_len=True),
                           feature("labels", "int64", [], "int", var_len=True)], allow_var_len=True)
        for f, n in enumerate(sizes):
            write_records(d / f"part-{f}.tfrecords", [sequence_example({}, {
                "frames": ("float", [[ident(s, f, r), j] for j in range(2 + r % 4)]),
                "labels": ("int", [[10 * r + j] for j in range(2 + r % 4)])}) for r in range(n)])
        manifested(d)
    return base


def ids_config(root, sources=(0, 1), weights=(1, 3), *, mixing=None, **args) -> dict:
    base = dict(target_batch_size=4, epochs=1, seed=7, shuffle=False)
    base.update(args)
    out = loader_config(root / "ids0", [("id", "id")], inputs=["id", "from"], **base)
    del out["args"]["dataset"], out["args"]["primary_features"]
    out["args"]["sources"] = [{"name": f"s{s}", "dataset": {"type": "dir", "args": {"data_dir": str(root / f"ids{s}")}},
                               "primary_features": [{"from_name": "id", "to_name": "id"}], "weight": w}
                              for s, w in zip(sources, weights)]
    out["args"]["secondary_features"] = [{"to_name": "from", "type": "mixture_source"}]
    if mixing is not None:
        out["args"]["mixing"] = mixing
    return out


def frames_config(root, **args) -> dict:
    out = loader_config(root / "frames0", [("frames", "frames"), ("labels", "labels")],
                        inputs=["frames", "from"], targets=["labels"], padding=[{"tensor": "labels", "value": -1}],
                        target_batch_size=3, epochs=1, seed=3, shuffle=False, **args)
    del out["args"]["dataset"], out["args"]["primary_features"]
    out["args"]["sources"] = [{"name": f"s{s}", "dataset": {"type": "dir", "args": {"data_dir": str(root / f"frames{s}")}},
                               "primary_features": [{"from_name": n, "to_name": n} for n in ("frames", "labels")],
                               "weight": 1 + s} for s in (0, 1)]
    out["args"]["secondary_features"] = [{"to_name": "from", "type": "mixture_source"}]
    return out


def takes_records(cfg: dict) -> bool:
    config = load_config(cfg)
    return mixture.parses_alike(registry.of(config), config)


def batches(cfg: dict, *call, **kwargs) -> list:
    return [tf.nest.map_structure(lambda t: t.numpy().tolist(), b) for b in build_input_fn(cfg)(*call, **kwargs)]


@pytest.fixture
def drawn(monkeypatch):
    """Counts the mixtures built to draw records (their records' parser): a test of that path asserts it
    did not fall back to drawing parsed examples."""
    built, parser = [], mixture._record_parser
    monkeypatch.setattr(mixture, "_record_parser", lambda *args: built.append(args) or parser(*args))
    return built


def parsed_first(cfg: dict, monkeypatch) -> list:
    """The same config's batches through the per-example mix of parsed examples."""
    with monkeypatch.context() as m:
        m.setattr(mixture, "parses_alike", lambda loader, config: False)
        return batches(cfg)


CASES = {
    "continue": lambda root: ids_config(root),
    "stop": lambda root: ids_config(root, weights=(3, 1), mixing={"exhausted": "stop"}),
    "repeat": lambda root: ids_config(root, weights=(1, 1), mixing={"exhausted": "repeat"}),
    "drop_remainder": lambda root: ids_config(root, weights=(3, 1), drop_remainder=True),
    "shuffled, two epochs": lambda root: ids_config(root, epochs=2, shuffle=True, num_shuffle_buffer_elements=8,
                                                    num_filenames_shuffle_buffer=2, num_mix_files=2),
    "three sources": lambda root: ids_config(root, (0, 1, 2), (1, 1, 1)),
    "feature lists, padded": lambda root: frames_config(root),
    "bucketed, within a token budget": lambda root: frames_config(root, bucketing={"by": "frames", "boundaries": [4],
                                                                                  "max_tokens": 12}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_batches_are_those_of_the_mix_of_parsed_examples(root, case, monkeypatch, drawn):
    cfg = CASES[case](root)
    got = batches(cfg)
    assert drawn and got == parsed_first(cfg, monkeypatch)
    # And the values are the records' own: each example from the source it says, every id where it was written.
    for b in got:
        features = b[0] if isinstance(b, tuple) else b
        if "id" in features:
            assert all(i // 10000 == s for i, s in zip(features["id"], features["from"]))
        else:
            for frames, s in zip(features["frames"], features["from"]):
                assert int(frames[0][0]) // 10000 == s


def test_every_record_once_and_the_drawn_order_kept(root, drawn):
    """Continue: every record of both sources once, each source's in its order (unshuffled), at 1:3."""
    got = [(s, i) for b in batches(ids_config(root)) for s, i in zip(b["from"], b["id"])]
    assert drawn
    expected = {s: [ident(s, f, r) for f, n in enumerate(FILES[s]) for r in range(n)] for s in (0, 1)}
    for s in (0, 1):
        assert [i for t, i in got if t == s] == expected[s]
    assert len(got) == 30


def test_feature_lists_are_padded_to_each_batchs_longest(root, drawn):
    """Frames and labels of every utterance, whole, padded (labels with -1) to its batch's longest."""
    seen = []
    got = batches(frames_config(root))
    assert drawn
    for features, labels in got:
        frames, targets = np.array(features["frames"]), np.array(labels["labels"])
        steps = [next((j for j in range(frames.shape[1]) if targets[k][j] == -1), frames.shape[1])
                 for k in range(len(targets))]
        assert max(steps) == frames.shape[1]  # trimmed to the longest of the batch
        for k, n in enumerate(steps):
            which = int(frames[k][0][0])
            r = which % 100
            assert n == 2 + r % 4
            assert frames[k][:n].tolist() == [[which, j] for j in range(n)]
            assert targets[k][:n].tolist() == [10 * r + j for j in range(n)]
            assert (targets[k][n:] == -1).all() and (frames[k][n:] == 0).all()
            seen.append(which)
    assert sorted(seen) == sorted(ident(s, f, r) for s in (0, 1) for f, n in enumerate(FILES[s]) for r in range(n))


@pytest.mark.parametrize("mode", ["replay", "state"])
@pytest.mark.parametrize("stop", [2, 6])
def test_resume_mid_epoch_continues_exactly(root, tmp_path, mode, stop, drawn):
    cfg = ids_config(root, epochs=2, resume=mode, shuffle=True, num_shuffle_buffer_elements=8,
                     num_filenames_shuffle_buffer=2, num_mix_files=2)
    whole, resumed = resumed_ids(cfg, tmp_path, stop)
    assert drawn and resumed == whole


def test_a_bad_record_is_named_by_its_own_file(root, tmp_path, drawn):
    """A record of the second source holding a float where its manifest says int: the error names that
    source's file and the record, not a file of the first source."""
    bad = tmp_path / "bad"
    write_manifest(bad, [feature("id", "int64", [], "int")])
    write_records(bad / "part-0.tfrecords", [example(id=("int", [ident(1, 0, r)])) for r in range(3)]
                  + [example(id=("float", [1.5]))])
    manifested(bad)
    cfg = ids_config(root)
    cfg["args"]["sources"][1]["dataset"]["args"]["data_dir"] = str(bad)
    with pytest.raises(DataError, match=rf"{bad}/part-0\.tfrecords: record 3\b"):
        batches(cfg)
    assert drawn


def test_sources_that_store_features_otherwise_keep_the_parsed_mix(root, tmp_path, monkeypatch):
    """Another stored name, a sequence loader, or more files than a drawn record's number can name: parsed
    examples are mixed, as before."""
    other = tmp_path / "named"
    write_manifest(other, [feature("ident", "int64", [], "int")])
    write_records(other / "part-0.tfrecords", [example(ident=("int", [ident(1, 0, r)])) for r in range(4)])
    manifested(other)
    renamed = ids_config(root)
    renamed["args"]["sources"][1]["dataset"]["args"]["data_dir"] = str(other)
    renamed["args"]["sources"][1]["primary_features"] = [{"from_name": "ident", "to_name": "id"}]
    assert not takes_records(renamed)
    assert collections.Counter(s for b in batches(renamed) for s in b["from"]) == {0: 10, 1: 4}
    windows = copy.deepcopy(ids_config(root))
    windows["type"] = "discrete_sequence"
    windows["args"].update(min_window=2, max_window=2)
    assert not takes_records(windows)
    monkeypatch.setattr(mixture, "RECORD_BITS", 61)  # room for 2**2 files; the two sources hold 5
    assert not takes_records(ids_config(root))
    assert collections.Counter(s for b in batches(ids_config(root)) for s in b["from"]) == {0: 10, 1: 20}


@pytest.mark.parametrize("drawn_as", ["records", "parsed examples"])
def test_an_example_over_the_token_budget_is_named_by_its_own_file(root, tmp_path, drawn_as, monkeypatch, drawn):
    """Bucketing with max_tokens names the first example over the budget: for an example of the second source,
    that source's file and record, whichever way the mix draws."""
    long = tmp_path / "long"
    write_manifest(long, [feature("frames", "float32", [2], "float", var_len=True),
                          feature("labels", "int64", [], "int", var_len=True)], allow_var_len=True)
    steps = [3, 3, 20, 3]
    write_records(long / "part-0.tfrecords", [sequence_example({}, {
        "frames": ("float", [[ident(1, 0, r), j] for j in range(n)]),
        "labels": ("int", [[10 * r + j] for j in range(n)])}) for r, n in enumerate(steps)])
    manifested(long)
    cfg = frames_config(root, bucketing={"by": "frames", "max_tokens": 12})
    cfg["args"]["sources"][1]["dataset"]["args"]["data_dir"] = str(long)
    if drawn_as == "parsed examples":
        monkeypatch.setattr(mixture, "parses_alike", lambda loader, config: False)
    with pytest.raises(DataError, match=rf"{long}/part-0\.tfrecords: record 2: "):
        batches(cfg)
    assert bool(drawn) == (drawn_as == "records")


def test_endless_epochs_follow_the_weights_as_the_parsed_mix_does(root, monkeypatch, drawn):
    """epochs: null, weights 1:3, 40 batches of 100: the batches of the parsed mix, and source 1's share
    within 0.035 of 0.75 (five standard deviations of a binomial share over 4,000 draws, 0.0068)."""
    cfg = ids_config(root, epochs=None, target_batch_size=100)
    assert takes_records(cfg)

    def first(n):
        return [b["id"].numpy().tolist() for b in build_input_fn(cfg)().take(n)]
    got = first(40)
    assert drawn
    with monkeypatch.context() as m:
        m.setattr(mixture, "parses_alike", lambda loader, config: False)
        assert first(40) == got
    sources = np.array([i // 10000 for b in got for i in b])
    assert len(sources) == 4000 and abs((sources == 1).mean() - 0.75) < 0.035


PIPELINE_CASES = {
    "continue": lambda root: ids_config(root),
    "stop": lambda root: ids_config(root, weights=(3, 1), mixing={"exhausted": "stop"}),
    "shuffled, two epochs": lambda root: ids_config(root, epochs=2, shuffle=True, num_shuffle_buffer_elements=8,
                                                    num_filenames_shuffle_buffer=2, num_mix_files=2),
}


@pytest.mark.parametrize("pipelines", [2, 3])
@pytest.mark.parametrize("case", list(PIPELINE_CASES))
def test_input_pipelines_draw_the_batches_of_the_parsed_mix(root, case, pipelines, monkeypatch, drawn):
    """Each of 2 or 3 input pipelines (tf.distribute) gives the parsed mix's batches; with 3, source 0's two
    files are shared by record. Under continue every record of both sources comes once across them."""
    cfg = PIPELINE_CASES[case](root)

    def per_pipeline():
        return [batches(cfg, tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=k,
                                                        num_replicas_in_sync=pipelines), params={"batch_size": 4 * pipelines})
                for k in range(pipelines)]
    got = per_pipeline()
    assert drawn and got == parsed_first_pipelines(per_pipeline, monkeypatch)
    if case == "continue":
        ids = sorted(i for pipeline in got for b in pipeline for i in b["id"])
        assert ids == sorted(ident(s, f, r) for s in (0, 1) for f, n in enumerate(FILES[s]) for r in range(n))


def parsed_first_pipelines(per_pipeline, monkeypatch) -> list:
    with monkeypatch.context() as m:
        m.setattr(mixture, "parses_alike", lambda loader, config: False)
        return per_pipeline()


def test_a_value_out_of_range_names_the_records_own_manifest(tmp_path, drawn):
    """A value of the second source's records that its manifest's int32 cannot hold: the message names that
    record, its file and its own manifest (not the first source's)."""
    for s in (0, 1):
        d = tmp_path / f"s{s}"
        write_manifest(d, [feature("id", "int32", [], "int")])
        write_records(d / "part-0.tfrecords", [example(id=("int", [v])) for v in
                                               [ident(s, 0, r) for r in range(3)] + ([2**40] if s else [])])
        manifested(d)
    cfg = loader_config(tmp_path / "s0", [("id", "id")], inputs=["id"], target_batch_size=8, seed=1)
    del cfg["args"]["dataset"], cfg["args"]["primary_features"]
    cfg["args"]["sources"] = [{"name": f"s{s}", "dataset": {"type": "dir", "args": {"data_dir": str(tmp_path / f"s{s}")}},
                               "primary_features": [{"from_name": "id", "to_name": "id"}]} for s in (0, 1)]
    with pytest.raises(DataError, match=rf"{tmp_path}/s1/part-0\.tfrecords: record 3: feature 'id' holds "
                                        rf"1099511627776, .* in the manifest {tmp_path}/s1/__manifest__\.json$"):
        batches(cfg)
    assert drawn


def test_large_records_are_read_in_blocks_of_at_most_8_mib(tmp_path, monkeypatch, drawn):
    """Records of 512 KiB: each source is read in blocks of 16 records (8 MiB, as one source would be), not
    1,024; every record still comes, whole."""
    from batchloaders.loaders import independent

    sizes, real = [], independent.records

    def records(config, shard, batch_size, reader):
        sizes.append(batch_size)
        return real(config, shard, batch_size, reader)
    monkeypatch.setattr(independent.Independent, "records", staticmethod(records))
    width = 512 * 1024
    for s in (0, 1):
        d = tmp_path / f"s{s}"
        write_manifest(d, [feature("x", "uint8", [width], "raw", endian="little"), feature("id", "int64", [], "int")])
        write_records(d / "part-0.tfrecords", [example(x=("bytes", [bytes([r]) * width]), id=("int", [ident(s, 0, r)]))
                                               for r in range(20)])
        manifested(d)
    cfg = loader_config(tmp_path / "s0", [("x", "x"), ("id", "id")], inputs=["x", "id"], target_batch_size=4, seed=1)
    del cfg["args"]["dataset"], cfg["args"]["primary_features"]
    cfg["args"]["sources"] = [{"name": f"s{s}", "dataset": {"type": "dir", "args": {"data_dir": str(tmp_path / f"s{s}")}},
                               "primary_features": [{"from_name": n, "to_name": n} for n in ("x", "id")]}
                              for s in (0, 1)]
    got = [(i, row[0], row[-1]) for b in batches(cfg) for i, row in zip(b["id"], b["x"])]
    assert drawn and sizes == [16, 16]
    assert sorted(got) == sorted((ident(s, 0, r), r, r) for s in (0, 1) for r in range(20))
