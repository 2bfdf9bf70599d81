"""``mixing.batches: stratified``: every batch holds a fixed number of examples of each source.

Source s, file f, record r holds id = 1000 * s + 100 * f + r. a (s = 0): files of 6 and 6 records; b (s = 1): 2
and 2; both store "id" alike (their records are drawn and parsed together). c (s = 2): one file of 9 records
storing it as "ident" (a mix with c cannot parse its sources' records together). x (s = 0) and y (s = 1): 4 files
of 8 and of 16 records, one file of each for each of 4 input pipelines.
"""
from __future__ import annotations

import json

import pytest
import tensorflow as tf

from batchloaders import ConfigError, build_input_fn, load_config
from batchloaders.cli.main import main
from batchloaders.config.strata import schedule
from batchloaders.loaders import stratified
from batchloaders.read import block_sizes
from conftest import example, feature, loader_config, resumed_ids, sequence_example, write_manifest, write_records

FILES = {"a": (6, 6), "b": (2, 2), "c": (9,), "x": (8,) * 4, "y": (16,) * 4}
FEATURE = {"a": "id", "b": "id", "c": "ident", "x": "id", "y": "id"}
INDEX = {"a": 0, "b": 1, "c": 2, "x": 0, "y": 1}


def ids(name: str) -> list[int]:
    return [1000 * INDEX[name] + 100 * f + r for f, n in enumerate(FILES[name]) for r in range(n)]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    base = tmp_path_factory.mktemp("stratified")
    for name, sizes in FILES.items():
        d = base / name
        write_manifest(d, [feature(FEATURE[name], "int64", [], "int")])
        for f, n in enumerate(sizes):
            write_records(d / f"part-{f}.tfrecords", [example(**{FEATURE[name]: ("int", [1000 * INDEX[name] + 100 * f + r])})
                                                      for r in range(n)])
        with pytest.raises(SystemExit):
            main(["manifest", str(d)])
    return base


def config(root, names, weights, *, exhausted="stop", batches="stratified", **args) -> dict:
    base = dict(target_batch_size=4, epochs=1, seed=3, shuffle=False)
    base.update(args)
    out = loader_config(root / names[0], [("id", "id")], inputs=["id"], **base)
    del out["args"]["dataset"], out["args"]["primary_features"]
    out["args"]["sources"] = [{"name": n, "weight": w, "dataset": {"type": "dir", "args": {"data_dir": str(root / n)}},
                               "primary_features": [{"from_name": FEATURE[n], "to_name": "id"}]}
                              for n, w in zip(names, weights)]
    out["args"]["mixing"] = {"exhausted": exhausted, "batches": batches}
    return out


def batches_of(cfg, **call) -> list[list[int]]:
    return [b["id"].numpy().tolist() for b in build_input_fn(cfg)(**call)]


def composition(batch: list[int]) -> tuple[int, ...]:
    """Examples of each source in a batch, checked to come a source after another in source order."""
    sources = [i // 1000 for i in batch]
    assert sources == sorted(sources)
    return tuple(sources.count(s) for s in range(3))


# (sources, weights, batch size, exhausted, drop_remainder, the batches' compositions, each source's ids in order)
CASES = {
    # 3:1 of 8: 6 + 2 in every batch; a (12) and b (4) both end after 2 batches.
    "3:1 batch 8, stop": (("a", "b"), (3, 1), 8, "stop", False, [(6, 2, 0)] * 2, {"a": ids("a"), "b": ids("b")}),
    # 1:1 of 6: 3 + 3; b runs out in the second batch, its last record beside a's 3; a's last 6 never read.
    "1:1 batch 6, stop, last short batch": (("a", "b"), (1, 1), 6, "stop", False, [(3, 3, 0), (3, 1, 0)],
                                            {"a": ids("a")[:6], "b": ids("b")}),
    "1:1 batch 6, stop, drop_remainder": (("a", "b"), (1, 1), 6, "stop", True, [(3, 3, 0)],
                                          {"a": ids("a")[:3], "b": ids("b")[:3]}),
    # 7:1 of 4: b's share is half an example, 0 in every other batch; a runs out in the fourth batch, its last
    # record beside b's.
    "7:1 batch 4, stop, 0 of b in every other batch": (("a", "b"), (7, 1), 4, "stop", False,
                                                       [(4, 0, 0), (3, 1, 0), (4, 0, 0), (1, 1, 0)],
                                                       {"a": ids("a"), "b": ids("b")[:2]}),
    # 1:1:1 of 4: the one example left over goes to each source in turn; a (12, the longest at its weight) ends
    # the run after 9 batches, b and c repeating; every source then has exactly 12 (c stored apart: each
    # source's blocks finished apart, as every source's are here).
    "1:1:1 batch 4, repeat": (("a", "b", "c"), (1, 1, 1), 4, "repeat", False, [(2, 1, 1), (1, 2, 1), (1, 1, 2)] * 3,
                              {"a": ids("a"), "b": ids("b") * 3, "c": (ids("c") * 2)[:12]}),
    # 7:1 of 4: b (4 records) is spent by the eighth batch; the ninth takes none of b and x still has its 4, so
    # it comes; the tenth would take one of b and ends the run.
    "7:1 batch 4, a batch taking none of a spent source": (("x", "b"), (7, 1), 4, "stop", True,
                                                           [(4, 0, 0), (3, 1, 0)] * 4 + [(4, 0, 0)],
                                                           {"x": ids("x"), "b": ids("b")}),
    # 3:1 of 2: the same, with much of x left: the run ends with b, never after it.
    "3:1 batch 2, nothing after the batch a spent source cannot fill": (("x", "b"), (3, 1), 2, "stop", False,
                                                                       [(2, 0, 0), (1, 1, 0)] * 4 + [(2, 0, 0)],
                                                                       {"x": ids("x")[:14], "b": ids("b")}),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_each_batch_holds_each_sources_count_in_its_own_order(root, case):
    names, weights, size, exhausted, drop, shapes, orders = CASES[case]
    got = batches_of(config(root, names, weights, exhausted=exhausted, target_batch_size=size, drop_remainder=drop))
    assert [composition(b) for b in got] == shapes
    for name in names:
        assert [i for b in got for i in b if i // 1000 == INDEX[name]] == orders[name]
    shares = [w / sum(weights) for w in weights]
    for b in got[:-1] if not drop else got:
        assert all(abs(n - share * size) < 1 for n, share in zip(composition(b), shares))


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_batches_joined_a_group_at_a_time_are_the_same_for_every_group_size(root, monkeypatch, case):
    """The pieces of a group of batches are joined at once (block_sizes.stratified_group): one batch, two (a
    part of a period, whole periods or neither), a period of the schedule or three, the batches are the ones
    expected, the last short one and its end included."""
    names, weights, size, exhausted, drop, shapes, orders = CASES[case]
    cfg = config(root, names, weights, exhausted=exhausted, target_batch_size=size, drop_remainder=drop)
    chosen = []
    for rule in (lambda period, _: 1, lambda period, _: 2, lambda period, _: period, lambda period, _: 3 * period):
        monkeypatch.setattr(block_sizes, "stratified_group", lambda period, batch_bytes, rule=rule:
                            chosen.append(rule(period, batch_bytes)) or chosen[-1])
        got = batches_of(cfg)
        assert [composition(b) for b in got] == shapes
        assert {name: [i for b in got for i in b if i // 1000 == INDEX[name]] for name in names} == orders
    period = len(schedule(weights, size))
    assert chosen == [1, 2, period, 3 * period]


GROUPS = [  # (period, bytes of a batch, batches joined at once)
    (1, 64 * 2**10, 32),  # small batches: GROUP_BATCHES of them
    (3, 64 * 2**10, 30),  # whole periods
    (1, 2**20, 8),  # GROUP_BYTES of batches
    (1, 64 * 2**20, 1),  # one batch larger than GROUP_BYTES
    (100, 64 * 2**10, 32),  # a long period: as many as one group holds, the groups repeating after 25 of them
    (4093, 64 * 2**10, 32),  # a prime period: the same
]


@pytest.mark.parametrize("period, batch_bytes, group", GROUPS)
def test_batches_joined_at_once_are_whole_periods_where_one_fits(period, batch_bytes, group):
    assert block_sizes.GROUP_BATCHES == 32 and block_sizes.GROUP_BYTES == 8 * 2**20
    assert block_sizes.stratified_group(period, batch_bytes) == group


def test_a_shuffled_source_comes_in_the_order_it_has_in_a_mix_by_example(root):
    """Each source is read as it is in every mode (its own shuffle, from the run's seed and its index): its
    examples come in the order a mix by example draws them in."""
    shuffled = dict(shuffle=True, num_shuffle_buffer_elements=4, num_filenames_shuffle_buffer=2, num_mix_files=2)
    strat = [i for b in batches_of(config(root, ("a", "b"), (3, 1), target_batch_size=8, **shuffled)) for i in b]
    mixed = [i for b in batches_of(config(root, ("a", "b"), (3, 1), batches="mixed", target_batch_size=8,
                                          **shuffled)) for i in b]
    for s in (0, 1):
        ours = [i for i in strat if i // 1000 == s]
        theirs = [i for i in mixed if i // 1000 == s]
        n = min(len(ours), len(theirs))  # (mixed's stop ends at its first source to run out, at random)
        assert n >= 2 and ours[:n] == theirs[:n] and sorted(ours) == sorted(ids("ab"[s]))
    assert [i for i in strat if i < 1000] != ids("a")  # (shuffled)


@pytest.mark.parametrize("mode, stop", [("replay", 2), ("state", 5)])
def test_resume_mid_epoch_continues_exactly(root, tmp_path, mode, stop):
    cfg = config(root, ("a", "b", "c"), (1, 1, 1), exhausted="repeat", epochs=2, resume=mode, shuffle=True,
                 num_shuffle_buffer_elements=4, num_filenames_shuffle_buffer=2, num_mix_files=2)
    whole, resumed = resumed_ids(cfg, tmp_path, stop)
    assert resumed == whole and len(whole) == 18


def test_two_input_pipelines_read_each_sources_records_once(root):
    """Each pipeline makes its batches of its share of every source (a: 6 records, b: 2): 3 + 1 a batch, both
    ending together, so that every record of both comes once over the two."""
    fn = build_input_fn(config(root, ("a", "b"), (3, 1)))
    got = []
    for k in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=k, num_replicas_in_sync=2)
        batches = [b["id"].numpy().tolist() for b in fn(context, params={"batch_size": 8})]
        assert [composition(b) for b in batches] == [(3, 1, 0)] * 2
        got += [i for b in batches for i in b]
    assert sorted(got) == sorted(ids("a") + ids("b"))


@pytest.mark.parametrize("group", [None, 5])
def test_four_input_pipelines_make_every_step_the_step_batchs_counts(root, monkeypatch, group):
    """Weights 1:2, a step of 4 pipelines' batches of 2 holds what a batch of 8 holds: (3, 5), (3, 5), (2, 6) in
    turn (8/3 and 16/3, carried), each pipeline's batch a hand of that row (docs/mixtures.md). Each pipeline
    reads one file of each source (sharded by file) and over the 12 steps takes exactly 8 x and 16 y: all of it.
    The same with the pieces joined 5 batches at a time (a pipeline's counts repeat after 12 batches)."""
    if group is not None:
        monkeypatch.setattr(block_sizes, "stratified_group", lambda period, batch_bytes: group)
    fn = build_input_fn(config(root, ("x", "y"), (1, 2)))
    per_pipeline = []
    for p in range(4):
        context = tf.distribute.InputContext(num_input_pipelines=4, input_pipeline_id=p, num_replicas_in_sync=4)
        batches = [b["id"].numpy().tolist() for b in fn(context, params={"batch_size": 8})]
        assert [i for b in batches for i in b if i < 1000] == [100 * p + r for r in range(8)]
        assert [i for b in batches for i in b if i >= 1000] == [1000 + 100 * p + r for r in range(16)]
        per_pipeline.append([composition(b)[:2] for b in batches])
    steps = [tuple(map(sum, zip(*step))) for step in zip(*per_pipeline)]
    assert [len(c) for c in per_pipeline] == [12] * 4
    assert steps == [(3, 5), (3, 5), (2, 6)] * 4
    assert per_pipeline[0] == [(1, 1), (1, 1), (0, 2), (1, 1), (1, 1), (0, 2), (1, 1), (0, 2), (1, 1), (0, 2), (1, 1),
                               (1, 1)]


def test_endless_epochs_keep_the_shares_in_every_batch(root):
    got = [b["id"].numpy().tolist() for b in build_input_fn(config(root, ("a", "c"), (1, 3), exhausted="continue",
                                                                    epochs=None, target_batch_size=8))().take(6)]
    assert [composition(b) for b in got] == [(2, 0, 6)] * 6
    assert [i for b in got for i in b if i < 1000] == (ids("a") * 1)[:12]


@pytest.mark.parametrize("change, where, said", [
    (dict(exhausted="continue"), r"\$\.args\.mixing\.exhausted", "found continue .*with batches stratified"),
    (dict(bucketing={"by": "id", "boundaries": [2], "batch_sizes": [2, 2]}), r"\$\.args\.mixing\.batches",
     r"found stratified with bucketing \(\$\.args\.bucketing\)"),
    (dict(packing={"length": 8, "tensors": ["id"]}), r"\$\.args\.mixing\.batches",
     r"found stratified with packing \(\$\.args\.packing\)"),
])
def test_a_combination_stratified_cannot_keep_is_refused_at_its_key(root, change, where, said):
    exhausted = change.pop("exhausted", "stop")
    with pytest.raises(ConfigError, match=rf"{where}: {said}"):
        load_config(config(root, ("a", "b"), (1, 1), exhausted=exhausted, **change))


def test_varying_shapes_from_sources_stored_apart_are_refused(tmp_path):
    for s, name in enumerate(("x", "xs")):
        d = tmp_path / name
        write_manifest(d, [feature(name, "int64", [], "int", var_len=True)], allow_var_len=True)
        write_records(d / "part-0.tfrecords", [sequence_example({}, {name: ("int", [[s]] * (r + 1))}) for r in range(3)])
    cfg = loader_config(tmp_path / "x", [("x", "x")], inputs=["x"], padding=True, epochs=1)
    del cfg["args"]["dataset"], cfg["args"]["primary_features"]
    cfg["args"]["sources"] = [{"weight": 1, "dataset": {"type": "dir", "args": {"data_dir": str(tmp_path / n)}},
                               "primary_features": [{"from_name": n, "to_name": "x"}]} for n in ("x", "xs")]
    cfg["args"]["mixing"] = {"exhausted": "stop", "batches": "stratified"}
    with pytest.raises(ConfigError, match=r"\$\.args\.mixing\.batches: found stratified, with sources whose records "
                                          r"are not stored alike .*tensor\(s\) 'x' of varying shape"):
        build_input_fn(cfg)()


def test_describe_shows_each_sources_count_per_batch(root, capsys):
    path = root / "strat.json"
    path.write_text(json.dumps(config(root, ("a", "b", "c"), (1, 1, 1), exhausted="repeat")))
    with pytest.raises(SystemExit):
        main(["describe", str(path)])
    out = capsys.readouterr().out
    assert "every batch holds each source's share of it by weight" in out
    assert "33.3% of each batch: 1 or 2 of 4" in out and "repeat every 3 batch(es)" in out
    with pytest.raises(SystemExit):
        main(["describe", "--json", str(path)])
    sources = json.loads(capsys.readouterr().out)["sources"]
    assert [s["per_batch"] for s in sources] == [{"fewest": 1, "most": 2, "period": 3}] * 3


A, B = ids("a"), ids("b")
# (weights, batch size, drop_remainder, the batches)
PATH_CASES = {
    "3:1 of 8, both ending together": ((3, 1), 8, False, [A[:6] + B[:2], A[6:] + B[2:]]),
    "1:1 of 6, b's last record beside a's 3": ((1, 1), 6, False, [A[:3] + B[:3], A[3:6] + B[3:]]),
    "1:1 of 6, drop_remainder": ((1, 1), 6, True, [A[:3] + B[:3]]),
}


@pytest.mark.parametrize("case", PATH_CASES, ids=list(PATH_CASES))
def test_finished_records_and_decoded_paths_give_the_same_batches(root, monkeypatch, case):
    """a and b store "id" alike, fixed-size: by default each source's blocks are parsed and finished where it
    reads them (finished); parsed per joined batch (records) or each source's blocks parsed then joined
    (decoded), the batches must be the same."""
    weights, size, drop, expected = PATH_CASES[case]
    cfg = config(root, ("a", "b"), weights, target_batch_size=size, drop_remainder=drop)
    real, taken, got = stratified.path, [], {}
    for how in (None, stratified.RECORDS, stratified.DECODED):
        def path(loader, config, finish, how=how):
            taken.append(real(loader, config, finish))
            return how or taken[-1]
        monkeypatch.setattr(stratified, "path", path)
        got[how] = batches_of(cfg)
    assert set(taken) == {stratified.FINISHED}  # (what the config takes unforced, on every build)
    assert got[None] == expected
    assert got[stratified.RECORDS] == expected and got[stratified.DECODED] == expected
    monkeypatch.setattr(stratified, "path", real)
    spec = tf.nest.flatten(build_input_fn(cfg)().element_spec)[0]
    assert spec.shape[0] == (size if drop else None)  # (whole batches' axis known, as one source's)
