"""Property: whatever happens to a data file's bytes, no record is lost without an error or a warning.

Hypothesis cuts, flips, inserts and appends bytes in file A of the corruption
matrix's dataset (its manifest lists the record counts) and reads it with a
random loader and policy. Under ``fail`` the run either delivers every record
of both files exactly, or raises a DataError naming file A after delivering a
prefix of A's records. Under ``skip_file`` it never raises, delivers a prefix
of A's records and all of B's, and names A in input_fn.skipped() whenever
fewer than all of A's records came out. A crash, a hang or another exception
fails the test.
"""
from __future__ import annotations

import os
import shutil

from hypothesis import HealthCheck, given, settings, strategies as st

import batchloaders
from test_corruption import B_CODES, LOADERS, RECORDS, a_codes, config, damaged_bytes, make_dataset, run

INTACT, _ = damaged_bytes("intact")
SIZE = len(INTACT)

damages = st.one_of(
    st.tuples(st.just("cut"), st.integers(0, SIZE - 1)),
    st.tuples(st.just("flip"), st.integers(0, SIZE - 1), st.integers(1, 255)),
    st.tuples(st.just("insert"), st.integers(0, SIZE), st.binary(min_size=1, max_size=24)),
    st.tuples(st.just("append"), st.binary(min_size=1, max_size=40)),
)


def damage(data: bytes, how: tuple) -> bytes:
    kind = how[0]
    if kind == "cut":
        return data[:how[1]]
    if kind == "flip":
        return data[:how[1]] + bytes([data[how[1]] ^ how[2]]) + data[how[1] + 1:]
    if kind == "insert":
        return data[:how[1]] + how[2] + data[how[1]:]
    return data + how[1]


@settings(max_examples=int(30 * float(os.environ.get("FUZZ_SCALE", "1"))), derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(how=damages, loader=st.sampled_from(sorted(LOADERS)), policy=st.sampled_from(["fail", "skip_file"]),
       parallel=st.booleans())
def test_damaged_bytes_are_never_lost_silently(tmp_path_factory, how, loader, policy, parallel):
    root = tmp_path_factory.mktemp("damage")
    d = make_dataset(root, "intact", counts=True)
    with open(os.path.join(d, "a.tfrecords"), "wb") as f:
        f.write(damage(INTACT, how))
    try:
        codes, error, input_fn = run(config(d, loader, parallel, policy))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    a_seen = [c for c in codes if c < 200]
    assert a_seen == a_codes(len(a_seen)), "A's records come out in order, from the first, none twice"
    if policy == "fail":
        if error is None:
            assert sorted(codes) == a_codes(RECORDS) + B_CODES
        else:
            assert isinstance(error, batchloaders.DataError)
            assert error.problems[0].file == os.path.join(d, "a.tfrecords")
        return
    assert error is None
    assert sorted(c for c in codes if c >= 200) == B_CODES
    if len(a_seen) < RECORDS:
        report = input_fn.skipped()
        assert report.files == {os.path.join(d, "a.tfrecords"): len(a_seen)}
        assert report.skipped_records == RECORDS - len(a_seen)
