"""``args.sources``: several datasets mixed into one stream by weight.

Source s, file f, record r holds id = 10000 * s + 100 * f + r, so every example says where it came from.
Source "a" (s = 0) calls the feature "id"; source "b" (s = 1) calls it "ident" (a per-source mapping).
a: files of 6 and 4 records; b: files of 9, 0 and 11; c (s = 2, three-source tests): one file of 5.
"""
from __future__ import annotations

import collections
import copy
import json
import shutil

import numpy as np
import pytest
import tensorflow as tf

import batchloaders
from batchloaders import ConfigError, build_input_fn, load_config
from batchloaders.cli.main import main
from conftest import (resumed_ids, example, feature, frame_offsets, loader_config, sequence_example, write_manifest,
                      write_records)

FILES = {"a": (6, 4), "b": (9, 0, 11), "c": (5,)}
FEATURE = {"a": "id", "b": "ident", "c": "id"}
INDEX = {"a": 0, "b": 1, "c": 2}


def ids(name: str) -> list[int]:
    s = INDEX[name]
    return [10000 * s + 100 * f + r for f, n in enumerate(FILES[name]) for r in range(n)]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    base = tmp_path_factory.mktemp("mixture")
    for name, sizes in FILES.items():
        d = base / name
        write_manifest(d, [feature(FEATURE[name], "int64", [], "int")])
        for f, n in enumerate(sizes):
            s = INDEX[name]
            write_records(d / f"part-{f}.tfrecords", [example(**{FEATURE[name]: ("int", [10000 * s + 100 * f + r])})
                                                      for r in range(n)])
        with pytest.raises(SystemExit):
            main(["manifest", str(d)])  # record counts, for weights by size
    return base


def source(root, name: str, weight=None) -> dict:
    out = {"name": name, "dataset": {"type": "dir", "args": {"data_dir": str(root / name)}},
           "primary_features": [{"from_name": FEATURE[name], "to_name": "id"}]}
    if weight is not None:
        out["weight"] = weight
    return out


def config(root, names=("a", "b"), weights=(1, 3), *, mixing=None, **args) -> dict:
    base = dict(target_batch_size=4, epochs=1, seed=7, shuffle=False)
    base.update(args)
    out = loader_config(root / "a", [("id", "id")], inputs=["id", "from"], **base)
    del out["args"]["dataset"], out["args"]["primary_features"]
    out["args"]["sources"] = [source(root, n, w) for n, w in zip(names, weights)]
    out["args"]["secondary_features"] = [{"to_name": "from", "type": "mixture_source"}]
    if mixing is not None:
        out["args"]["mixing"] = mixing
    return out


def drawn(cfg, **call) -> list[tuple[int, int]]:
    """(source index, id) of every example, in order, each checked to come from the source it says."""
    out = []
    for batch in build_input_fn(cfg)(**call):
        for source_index, i in zip(batch["from"].numpy().tolist(), batch["id"].numpy().tolist()):
            assert i // 10000 == source_index
            out.append((source_index, i))
    return out


def test_every_record_of_every_source_once_per_epoch(root):
    got = drawn(config(root, epochs=2))
    for name in ("a", "b"):
        assert sorted(i for s, i in got if s == INDEX[name]) == sorted(ids(name) * 2)
    # Unshuffled, each source's records come in its own order: epoch after epoch.
    assert [i for s, i in got if s == 1] == ids("b") * 2


def test_the_observed_shares_follow_the_weights(root):
    """Endless epochs, 4,000 examples at weights 1:3: b's share is within 0.035 of 0.75 (five standard deviations
    of a binomial share over 4,000 draws, 0.0068)."""
    dataset = build_input_fn(config(root, epochs=None, target_batch_size=100))().take(40)
    sources = np.concatenate([b["from"].numpy() for b in dataset])
    assert len(sources) == 4000
    assert abs((sources == 1).mean() - 0.75) < 0.035


def test_weights_default_to_the_record_counts(root):
    """No weights: a holds 10 records and c 5, so a is drawn 2/3 of the time."""
    dataset = build_input_fn(config(root, ("a", "c"), (None, None), epochs=None, target_batch_size=100))().take(30)
    sources = np.concatenate([b["from"].numpy() for b in dataset])
    assert abs((sources == 0).mean() - 2 / 3) < 0.045  # 5 standard deviations over 3,000 draws
    assert load_config(config(root, ("a", "c"), (None, None))).sources[1].weight == 5.0


def test_same_seed_same_order_another_seed_another(root):
    one = drawn(config(root, shuffle=True, num_shuffle_buffer_elements=8, num_filenames_shuffle_buffer=2,
                       num_mix_files=2))
    assert drawn(config(root, shuffle=True, num_shuffle_buffer_elements=8, num_filenames_shuffle_buffer=2,
                        num_mix_files=2)) == one
    other = drawn(config(root, seed=8, shuffle=True, num_shuffle_buffer_elements=8, num_filenames_shuffle_buffer=2,
                         num_mix_files=2))
    assert sorted(other) == sorted(one) and other != one


def test_stop_ends_at_the_first_source_to_run_out(root):
    got = drawn(config(root, weights=(3, 1), mixing={"exhausted": "stop"}))
    from_a = [i for s, i in got if s == 0]
    from_b = [i for s, i in got if s == 1]
    assert from_a == ids("a")  # a ran out first (10 records at weight 3, b's 20 at weight 1)
    assert 0 < len(from_b) < len(ids("b")) and from_b == ids("b")[:len(from_b)]
    last_a = max(k for k, (s, _) in enumerate(got) if s == 0)
    assert all(s == 1 for s, _ in got[last_a + 1:])  # after a's last record only b, until a is drawn again


def test_repeat_goes_on_until_the_longest_source_ends(root):
    """a (10 records, weight 1) would last 10 draws per unit weight, b (20, weight 1) 20: b ends the run, a repeats."""
    got = drawn(config(root, weights=(1, 1), mixing={"exhausted": "repeat"}))
    from_b = [i for s, i in got if s == 1]
    from_a = [i for s, i in got if s == 0]
    assert from_b == ids("b")
    assert len(from_a) > len(ids("a"))
    assert from_a == (ids("a") * 10)[:len(from_a)]  # a's records in order, again and again


def test_batches_per_source_hold_one_source_each(root):
    batches = list(build_input_fn(config(root, epochs=2, mixing={"batches": "per_source"}))())
    assert all(len(set(b["from"].numpy().tolist())) == 1 for b in batches)
    got = [(int(s), int(i)) for b in batches for s, i in zip(b["from"].numpy(), b["id"].numpy())]
    assert sorted(i for s, i in got if s == 0) == sorted(ids("a") * 2)
    assert sorted(i for s, i in got if s == 1) == sorted(ids("b") * 2)


def test_three_sources_with_the_source_name(root):
    cfg = config(root, ("a", "b", "c"), (1, 1, 1), epochs=1)
    cfg["model"]["inputs"].append("name")
    cfg["args"]["secondary_features"].append({"to_name": "name", "type": "mixture_source", "args": {"value": "name"}})
    names = [n.decode() for b in build_input_fn(cfg)() for n in b["name"].numpy()]
    assert collections.Counter(names) == {"a": 10, "b": 20, "c": 5}


@pytest.mark.parametrize("mode", ["replay", "state"])
@pytest.mark.parametrize("stop", [2, 5])
def test_resume_mid_epoch_continues_exactly(root, tmp_path, mode, stop):
    cfg = config(root, epochs=2, resume=mode, shuffle=True, num_shuffle_buffer_elements=8,
                 num_filenames_shuffle_buffer=2, num_mix_files=2)
    whole, resumed = resumed_ids(cfg, tmp_path, stop)
    assert resumed == whole


def test_input_pipelines_share_every_source(root):
    fn = build_input_fn(config(root, epochs=1))
    got = []
    for k in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=k, num_replicas_in_sync=2)
        got += [i for b in fn(context, params={"batch_size": 4}) for i in b["id"].numpy().tolist()]
    assert sorted(got) == sorted(ids("a") + ids("b"))


def test_a_tensor_that_differs_between_sources_names_both(root, tmp_path):
    d = tmp_path / "floats"
    write_manifest(d, [feature("id", "float32", [], "float")])
    write_records(d / "part-0.tfrecords", [example(id=("float", [1.0]))])
    cfg = config(root)
    cfg["args"]["sources"][1] = {"name": "floats", "dataset": {"type": "dir", "args": {"data_dir": str(d)}},
                                 "primary_features": [{"from_name": "id", "to_name": "id"}], "weight": 1}
    with pytest.raises(ConfigError, match=r"\$\.args\.sources\[1\]\.primary_features\[0\]\.from_name: source 'floats' "
                                          r"gives tensor 'id' as float32 \[\] \(feature 'id' of .*floats/__manifest__\.json\), source 'a' as int64 \[\]"):
        load_config(cfg)


@pytest.mark.parametrize("change, where, said", [
    (lambda c: c["args"]["sources"][1]["primary_features"].__setitem__(0, {"from_name": "ident", "to_name": "idx"}),
     r"\$\.args\.sources\[1\]\.primary_features\[0\]\.to_name", "gives tensor 'idx', which source 'a' does not"),
    (lambda c: c["args"]["sources"][1].__setitem__("name", "a"), r"\$\.args\.sources\[1\]\.name",
     "duplicate source name 'a'"),
    (lambda c: c["args"]["sources"][1].pop("weight"), r"\$\.args\.sources", "weights for some sources but not for 'b'"),
    (lambda c: c["args"].__setitem__("dataset", {"type": "dir", "args": {"data_dir": "x"}}), r"\$\.args\.sources",
     "found sources and dataset"),
    (lambda c: c["args"]["sources"][0]["dataset"]["args"].__setitem__("data_dir", "/nonexistent/x"),
     r"\$\.args\.sources\[0\]\.dataset\.args\.data_dir", "expected an existing directory"),
    (lambda c: c["args"]["sources"][1]["primary_features"][0].__setitem__("from_name", "idd"),
     r"\$\.args\.sources\[1\]\.primary_features\[0\]\.from_name", "'idd' is not in the manifest"),
])
def test_config_problems_point_into_the_source(root, change, where, said):
    cfg = config(root)
    change(cfg)
    with pytest.raises(ConfigError, match=rf"{where}: .*{said}"):
        load_config(cfg)


def test_mixture_source_without_sources_is_refused(root):
    cfg = loader_config(root / "a", [("id", "id")], inputs=["id", "from"],
                        secondary_features=[{"to_name": "from", "type": "mixture_source"}])
    with pytest.raises(ConfigError, match=r"secondary_features\[0\]\.type: .*expected sources in args"):
        load_config(cfg)


def test_packing_rows_from_two_sources(tmp_path):
    """Sequences of two corpora packed into rows of 8 steps: every sequence whole, once."""
    lengths = {0: [3, 5, 2, 7], 1: [4, 1, 6]}
    for s, ls in lengths.items():
        d = tmp_path / f"s{s}"
        write_manifest(d, [feature("x", "int64", [], "int", var_len=True)], allow_var_len=True)
        write_records(d / "part-0.tfrecords", [sequence_example({}, {"x": ("int", [[1000 * s + 10 * r + j]
                                                                                   for j in range(n)])})
                                               for r, n in enumerate(ls)])
    cfg = loader_config(tmp_path / "s0", [("x", "x")], inputs=["x", "segment_ids", "positions"], target_batch_size=2,
                        packing={"length": 8, "tensors": ["x"]}, padding=True, seed=1)
    del cfg["args"]["dataset"], cfg["args"]["primary_features"]
    cfg["args"]["sources"] = [{"dataset": {"type": "dir", "args": {"data_dir": str(tmp_path / f"s{s}")}},
                               "primary_features": [{"from_name": "x", "to_name": "x"}], "weight": 1} for s in (0, 1)]
    found = []
    for batch in build_input_fn(cfg)():
        x, seg = batch["x"].numpy(), batch["segment_ids"].numpy()
        assert x.shape[1] == 8
        for row, ids_ in zip(x, seg):
            for k in range(1, ids_.max() + 1):
                found.append(tuple(row[ids_ == k].tolist()))
    expected = {tuple(1000 * s + 10 * r + j for j in range(n)) for s, ls in lengths.items() for r, n in enumerate(ls)}
    assert sorted(found) == sorted(expected)


def test_the_cardinality_is_declared_when_every_record_is_read_once(root):
    assert build_input_fn(config(root, epochs=2))().cardinality().numpy() == 15  # 2 x 30 examples, batches of 4
    per_source = build_input_fn(config(root, epochs=2, mixing={"batches": "per_source"}))()
    assert per_source.cardinality().numpy() == 5 + 10 == len(list(per_source))  # 20 of a, 40 of b
    assert build_input_fn(config(root, mixing={"exhausted": "stop"}))().cardinality().numpy() < 0  # unknown


@pytest.mark.parametrize("loader", ["continuous_sequence", "discrete_sequence"])
def test_sequence_loaders_mix_windows(tmp_path, loader):
    """Two corpora of the same layout (tests/seqdata.py): every window of both, once, whole; the source each
    window came from is told by mixture_source (the values alone repeat between the corpora)."""
    from seqdata import write_continuous, write_discrete

    if loader == "continuous_sequence":
        dirs = [write_continuous(tmp_path / f"c{s}", [3 + s, 2]) for s in (0, 1)]  # 4 frames a record
        primary, size = [("y", "y")], 4
    else:
        dirs = [write_discrete(tmp_path / f"d{s}", [[(1, 1)] * (4 + 2 * s), [(1, 1)] * 2]) for s in (0, 1)]
        primary, size = [("rid", "rid")], 2
    cfg = loader_config(dirs[0], primary, inputs=[primary[0][1], "from"], loader=loader, min_window=size,
                        max_window=size, target_batch_size=3, seed=2,
                        secondary_features=[{"to_name": "from", "type": "mixture_source"}])
    del cfg["args"]["dataset"], cfg["args"]["primary_features"]
    cfg["args"]["sources"] = [{"dataset": {"type": "dir", "args": {"data_dir": str(d)}}, "weight": 1,
                               "primary_features": [{"from_name": a, "to_name": b} for a, b in primary]} for d in dirs]
    got = []
    for batch in build_input_fn(cfg)():
        for window, s in zip(batch[primary[0][1]].numpy(), batch["from"].numpy()):
            step = 1000 if loader == "continuous_sequence" else 100  # file f: values from step * f up
            f, first = divmod(int(window[0]), step)
            assert window.tolist() == [step * f + first + j for j in range(size)]
            got.append((int(s), f, first))
    if loader == "continuous_sequence":  # files of 12 + 4s and 8 frames, windows of 4 back to back
        expected = [(s, f, p) for s in (0, 1) for f, frames in enumerate((12 + 4 * s, 8)) for p in range(0, frames, 4)]
    else:  # files of 4 + 2s and 2 records, windows of 2 records
        expected = [(s, f, r) for s in (0, 1) for f, n in enumerate((4 + 2 * s, 2)) for r in range(0, n, 2)]
    assert sorted(got) == sorted(expected)


def test_a_source_without_records_is_refused(root, tmp_path):
    d = tmp_path / "none"
    write_manifest(d, [feature("id", "int64", [], "int")])
    write_records(d / "part-0.tfrecords", [])
    with pytest.raises(SystemExit):
        main(["manifest", str(d)])
    cfg = config(root)
    cfg["args"]["sources"][1] = {"name": "none", "dataset": {"type": "dir", "args": {"data_dir": str(d)}},
                                 "primary_features": [{"from_name": "id", "to_name": "id"}], "weight": 1}
    with pytest.raises(ConfigError, match=r"\$\.args\.sources: source\(s\) 'none' hold no records"):
        load_config(cfg)


def test_drop_remainder_drops_only_the_mixed_streams_last_batch(root):
    """Each source's last, short block is drawn from like the rest: drop_remainder drops only what the mixed
    stream's last batch would hold (30 examples in batches of 4: 28 come, the first 28 of the stream)."""
    # Weights 3:1: a (10 records) runs out early, its last block of 2 drawn well before the stream ends.
    kept = drawn(config(root, weights=(3, 1), drop_remainder=True))
    whole = drawn(config(root, weights=(3, 1), drop_remainder=False))
    last_of_a = max(k for k, (s, _) in enumerate(whole) if s == 0)
    assert len(whole) == 30 and last_of_a < 28
    assert kept == whole[:28]


@pytest.mark.parametrize("mixing, said", [({"exhausted": "continue", "bogus": 1}, r"\$\.args\.mixing\.bogus: unknown key"),
                                          ("fast", r"\$\.args\.mixing: expected object, found string")])
def test_a_broken_mixing_block_is_a_config_error(root, mixing, said):
    cfg = config(root)
    cfg["args"]["mixing"] = mixing
    with pytest.raises(ConfigError, match=said):
        load_config(cfg)


def test_per_source_batches_are_finished_where_each_source_parses_them(root):
    """Without a secondary feature each source's blocks become the model's batches where its loader parses them
    (as one source's do): the batches and their order are those of the same mix made through the shared
    finishing map, and no map follows the choice of source."""
    with_name = config(root, epochs=2, mixing={"batches": "per_source"})
    plain = copy.deepcopy(with_name)
    del plain["args"]["secondary_features"]
    plain["model"]["inputs"] = ["id"]
    dataset = build_input_fn(plain)()
    got = [b["id"].numpy().tolist() for b in dataset]
    assert got == [b["id"].numpy().tolist() for b in build_input_fn(with_name)()]
    assert all(len({i // 10000 for i in batch}) == 1 for batch in got)
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    chosen = [n.name for n in graph.node if n.op == "DirectedInterleaveDataset"]
    after = [n.op for n in graph.node if any(i.split(":")[0] in chosen for i in n.input)]
    assert len(chosen) == 1 and not [op for op in after if "Map" in op]


def test_a_later_sources_file_not_its_listed_size_is_located(root, tmp_path):
    """`batchloaders manifest` lists sizes, so each file's size is checked (read/proven.py), whose failure
    names no file: the error is placed among every source's files, not only the first source's."""
    shutil.copytree(root / "a", tmp_path / "a")
    shutil.copytree(root / "b", tmp_path / "b")
    batches = batchloaders.build_input_fn(config(tmp_path))()
    path = tmp_path / "b" / "part-2.tfrecords"
    listed = path.stat().st_size
    cut_at = frame_offsets([example(ident=("int", [10000 + 200 + r])) for r in range(11)])[5]
    path.write_bytes(path.read_bytes()[:cut_at])  # at a record boundary, after the build (which would report it)
    with pytest.raises(batchloaders.DataError) as caught:
        list(batches)
    problem, = caught.value.problems
    assert (problem.file, problem.path) == (str(path), f"batchloaders data error at byte {cut_at}")
    assert f"lists {listed} bytes for this file (size_bytes), but it is {cut_at} bytes when it is" in problem.message
