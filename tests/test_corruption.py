"""The corruption matrix: damaged files and records that disagree with the manifest, for every loader.

Each dataset has two files of 6 records. File A (``a.tfrecords``) is damaged
as the case says, file B is intact. Record r of file f holds x = [c, c] and
r = [c % 256, c % 256] (raw uint8) with c = 100 * f + r, so every delivered
example says which record it came from. Every loader is set up so that one
record makes one example (independent: batch 1; continuous: windows of the
2 steps a record holds; discrete: windows of 1 record), unshuffled, with
parallel reads off (files in order) and on (2 files interleaved; the independent loader then
parses each block in its file's reading thread, in an inline map).

Expected outcome per case (see README, "Damaged data"):
``good``: the records of file A delivered (A's own, before the damage), and
what the check says: None (nothing noticed), or a substring of the error.
"""
from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import struct

import pytest
import tensorflow as tf

import batchloaders
from conftest import example, flip_byte, frame_offsets, sequence_example, write_records

RECORDS = 6
A, B = 1, 2
BAD = 3  # the record a damage hits


def record(f: int, i: int, **change) -> bytes:
    c = 100 * f + i
    features = {"x": ("int", [c, c]), "r": ("string", [bytes([c % 256] * 2)])}
    features.update(change)
    return example(**{k: v for k, v in features.items() if v is not None})


def flip(data: bytes, at: int) -> bytes:
    return flip_byte(data, at, 0x5A)


def framed(records):
    """The bytes TFRecordWriter writes for ``records`` (written through TensorFlow to be exact)."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = write_records(os.path.join(d, "x.tfrecords"), records)
        with open(path, "rb") as f:
            return f.read()


GOOD = [record(A, r) for r in range(RECORDS)]
AT = frame_offsets(GOOD)


def damaged_bytes(case: str) -> tuple[bytes, str | None]:
    """File A's bytes for ``case`` and the compression the manifest declares."""
    data = framed(GOOD)
    gz = gzip.compress(data)
    return {
        "intact": (data, None),
        "truncated mid-payload": (data[:AT[BAD] + 12 + 5], None),
        "truncated inside a header": (data[:AT[BAD] + 5], None),
        "truncated at a boundary": (data[:AT[BAD]], None),
        "flipped byte in length": (flip(data, AT[BAD] + 1), None),
        "flipped byte in length checksum": (flip(data, AT[BAD] + 9), None),
        "flipped byte in payload": (flip(data, AT[BAD] + 12 + 4), None),
        "flipped byte in payload checksum": (flip(data, AT[BAD + 1] - 2), None),
        "garbage appended": (data + b"not a record, just bytes", None),
        "empty file": (b"", None),
        "not a TFRecord file": (b"name,value\n" + b"a,1\n" * 40, None),
        "GZIP read without compression": (gz, None),
        "uncompressed read as GZIP": (data, "gzip"),
        "damaged GZIP": (gz[:len(gz) // 2] + bytes([gz[len(gz) // 2] ^ 0xFF]) + gz[len(gz) // 2 + 1:], "gzip"),
        "GZIP missing its trailer": (gz[:-8], "gzip"),
        "GZIP cut short": (gz[:20], "gzip"),
        "two GZIP streams in one file": (gzip.compress(data[:AT[BAD]]) + gzip.compress(data[AT[BAD]:]), "gzip"),
    }[case]


RECORD_CASES = {  # the BAD record of file A replaced; data that disagrees with the manifest
    "record missing a feature": record(A, BAD, x=None),
    "record with the wrong stored type": record(A, BAD, x=("float", [103.0, 103.0])),
    "raw feature with the wrong byte length": record(A, BAD, r=("string", [b"\x67\x67\x67"])),
    "shape that disagrees with the manifest": record(A, BAD, x=("int", [103, 103, 103])),
    "SequenceExample read as Example": sequence_example({}, {"x": ("int", [[103], [103]])}),
}

# case -> (records of A delivered under fail, under skip_file, what the error or warning says).
# None: read without any error or warning (with counts unknown): only verify can tell.
FILE_CASES = {
    "intact": (6, 6, None),
    "truncated mid-payload": (3, 3, "after record 2"),
    "truncated inside a header": (3, 3, "the rest is not a whole record"),
    "truncated at a boundary": (3, 3, None),
    "flipped byte in length": (3, 3, "frame or checksum is damaged"),
    "flipped byte in length checksum": (3, 3, "frame or checksum is damaged"),
    "flipped byte in payload": (3, 3, "frame or checksum is damaged"),
    "flipped byte in payload checksum": (3, 3, "frame or checksum is damaged"),
    "garbage appended": (6, 6, "after record 5"),
    "empty file": (0, 0, None),
    "not a TFRecord file": (0, 0, "before the first record"),
    "GZIP read without compression": (0, 0, "the file is GZIP-compressed, but the manifest"),
    "uncompressed read as GZIP": (0, 0, "the file is not compressed, but the manifest"),
    "damaged GZIP": (0, 0, "GZIP stream is damaged"),
    "GZIP missing its trailer": (6, 6, "lacks its trailer"),
    "GZIP cut short": (0, 0, "GZIP stream is damaged"),
    # TensorFlow reads every stream; the trailer records the last one's size only, so the end check fails.
    "two GZIP streams in one file": (6, 6, "several GZIP streams concatenated into one file"),
}
# The manifest contradicting the data: a DataError when the pipeline is built, under either policy.
CONTRADICTS = {"GZIP read without compression", "uncompressed read as GZIP"}
# With the manifest's files listing num_records, a file that reads short says so.
WITH_COUNTS = {"truncated at a boundary": "lists 6 records for this file, but 3 were read",
               "empty file": "lists 6 records for this file, but 0 were read"}

LOADERS = {
    "independent": {"target_batch_size": 1},
    "continuous_sequence": {"target_batch_size": 1, "min_window": 2, "max_window": 2},
    "discrete_sequence": {"target_batch_size": 1, "min_window": 1, "max_window": 1},
}


def make_dataset(root, case: str, *, counts: bool = False) -> str:
    """Write the dataset of ``case`` under root; return its directory."""
    d = os.path.join(str(root), case.replace(" ", "_"))
    os.makedirs(d, exist_ok=True)
    compression = None
    if case in RECORD_CASES:
        records = list(GOOD)
        records[BAD] = RECORD_CASES[case]
        write_records(os.path.join(d, "a.tfrecords"), records)
    else:
        data, compression = damaged_bytes(case)
        with open(os.path.join(d, "a.tfrecords"), "wb") as f:
            f.write(data)
    other = [record(B, r) for r in range(RECORDS)]
    write_records(os.path.join(d, "b.tfrecords"), other, compression)
    manifest = {"compression": compression, "allow_var_len": False, "features": [
        {"name": "x", "dtype": "int64", "shape": [2], "deserialize_type": "int"},
        {"name": "r", "dtype": "uint8", "shape": [2], "deserialize_type": "raw",
         "deserialize_args": {"endian": "little"}}]}
    if counts:
        manifest["files"] = [{"name": "a.tfrecords", "num_records": RECORDS},
                             {"name": "b.tfrecords", "num_records": RECORDS}]
    with open(os.path.join(d, "__manifest__.json"), "w") as f:
        json.dump(manifest, f)
    return d


def config(data_dir: str, loader: str, parallel: bool, on_corrupt: str) -> dict:
    args = {"dataset": {"type": "dir", "args": {"data_dir": data_dir}}, "drop_remainder": False, "epochs": 1,
            "num_parallel_reads": 2 if parallel else 1, "num_read_buffer_bytes": 0, "num_prefetch": -1,
            "primary_features": [{"from_name": "x", "to_name": "x"}, {"from_name": "r", "to_name": "r"}],
            "on_corrupt": on_corrupt, **LOADERS[loader]}
    if loader == "independent" and parallel:
        # Blocks parsed in each file's reading thread (an inline map after the end-of-file check) rather
        # than in a map stage of their own: the path a config giving num_parallel_parses takes.
        args["num_parallel_parses"] = 1
    return {"type": loader, "model": {"inputs": ["x", "r"], "targets": []}, "args": args}


def run(cfg: dict):
    """(codes delivered, DataError or None, input_fn): every example's record code, in order."""
    input_fn = batchloaders.build_input_fn(cfg)
    codes, error = [], None
    try:
        with batchloaders.data_errors():
            for batch in input_fn():
                x, r = batch["x"].numpy().reshape(-1, 2), batch["r"].numpy().reshape(-1, 2)
                for (c0, c1), (r0, r1) in zip(x.tolist(), r.tolist()):
                    assert c0 == c1 and r0 == r1 == c0 % 256, (c0, c1, r0, r1)  # values stay whole
                    codes.append(c0)
    except batchloaders.DataError as e:
        error = e
    return codes, error, input_fn


def a_codes(n: int) -> list[int]:
    return [100 * A + r for r in range(n)]


B_CODES = [100 * B + r for r in range(RECORDS)]


def alternating(*lists, parity: int) -> list[tuple]:
    """The combinations of the lists' items whose positions add up to ``parity`` (mod 2): half of the whole
    product, in which each combination of all lists but the last appears once, the last list's items
    alternating. Each damage still meets each loader, each loader reads serial and parallel, and the two
    policies take opposite halves, so between them every (case, loader, reading) is run: the whole product
    under both policies was 192 builds, a sixth of the suite's time."""
    return [tuple(x for _, x in combo) for combo in itertools.product(*(list(enumerate(items)) for items in lists))
            if sum(i for i, _ in combo) % 2 == parity]


MATRIX_FAIL = alternating(list(FILE_CASES), list(LOADERS), [False, True], parity=0)
MATRIX_SKIP = alternating(list(FILE_CASES), list(LOADERS), [False, True], parity=1)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("corruption")
    return {(case, counts): make_dataset(root / ("counts" if counts else "plain"), case, counts=counts)
            for case in list(FILE_CASES) + list(RECORD_CASES) for counts in (False, True)}


def contradiction(data_dir, loader, parallel, on_corrupt, says):
    """A file compressed otherwise than the manifest says is never skipped: the build names it."""
    with pytest.raises(batchloaders.DataError) as caught:
        batchloaders.build_input_fn(config(data_dir, loader, parallel, on_corrupt))
    problem, = caught.value.problems
    assert (problem.file, problem.path) == (os.path.join(data_dir, "a.tfrecords"), "compression")
    assert problem.message.startswith(says + " " + os.path.join(data_dir, "__manifest__.json") + " says compression ")


@pytest.mark.parametrize("case,loader,parallel", MATRIX_FAIL,
                         ids=[f"{c}-{l}-{'parallel' if p else 'serial'}" for c, l, p in MATRIX_FAIL])
def test_damaged_file_under_fail(datasets, case, loader, parallel):
    delivered, _, says = FILE_CASES[case]
    if case in CONTRADICTS:
        return contradiction(datasets[case, False], loader, parallel, "fail", says)
    codes, error, _ = run(config(datasets[case, False], loader, parallel, "fail"))
    assert [c for c in codes if c < 200] == a_codes(delivered)  # A's good records, in order, then the error
    if says is None:
        assert error is None
        assert sorted(c for c in codes if c >= 200) == B_CODES
        return
    assert error is not None, f"{case}: no error"
    problem = error.problems[0]
    assert problem.file.endswith("a.tfrecords")
    assert problem.path.startswith("batchloaders data error at byte ")
    assert says in str(error)
    if delivered:
        assert f"after record {delivered - 1} " in problem.path
    if not parallel:  # files in order: B is never reached
        assert codes == a_codes(delivered)


@pytest.mark.parametrize("case,loader,parallel", MATRIX_SKIP,
                         ids=[f"{c}-{l}-{'parallel' if p else 'serial'}" for c, l, p in MATRIX_SKIP])
def test_damaged_file_under_skip_file(datasets, capfd, case, loader, parallel):
    _, delivered, says = FILE_CASES[case]
    if case in CONTRADICTS:
        return contradiction(datasets[case, False], loader, parallel, "skip_file", says)
    codes, error, input_fn = run(config(datasets[case, False], loader, parallel, "skip_file"))
    assert error is None
    assert sorted(codes) == a_codes(delivered) + B_CODES  # every good record, nothing twice
    report = input_fn.skipped()
    warnings = [line for line in capfd.readouterr().err.splitlines() if "WARNING" in line and "a.tfrecords" in line]
    if says is None:
        assert report.files == {} and warnings == []
        return
    assert list(report.files) == [os.path.join(datasets[case, False], "a.tfrecords")]
    assert report.files[os.path.join(datasets[case, False], "a.tfrecords")] == delivered
    assert report.skipped_records is None  # counts unknown: the manifest lists no files
    assert len(warnings) == 1 and says in warnings[0]
    assert f"skipped the rest of the file ({delivered} records read from it)" in warnings[0]


@pytest.mark.parametrize("case", sorted(WITH_COUNTS))
@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_counts_catch_what_reads_cleanly(datasets, capfd, case, loader):
    delivered = FILE_CASES[case][0]
    codes, error, _ = run(config(datasets[case, True], loader, False, "fail"))
    assert codes == a_codes(delivered)
    assert error is not None and WITH_COUNTS[case] in str(error)
    codes, error, input_fn = run(config(datasets[case, True], loader, True, "skip_file"))
    assert error is None and sorted(codes) == a_codes(delivered) + B_CODES
    report = input_fn.skipped()
    assert report.skipped_files == 1 and report.skipped_records == RECORDS - delivered


def test_skips_add_up_over_epochs(datasets):
    d = datasets["truncated at a boundary", True]
    cfg = config(d, "independent", False, "skip_file")
    cfg["args"]["epochs"] = 2
    codes, error, input_fn = run(cfg)
    assert error is None and sorted(codes) == sorted(2 * (a_codes(3) + B_CODES))
    report = input_fn.skipped()
    assert report.files == {os.path.join(d, "a.tfrecords"): 6} and report.skipped_records == 6
    assert str(report).splitlines()[0] == "1 file(s) skipped, 6 record(s) not read"


# Each (case, loader, policy) once, serial and parallel reading alternating (see alternating).
RECORD_MATRIX = [(case, loader, parallel, policy) for case, loader, policy, parallel in alternating(
    list(RECORD_CASES), list(LOADERS), ["fail", "skip_file"], [False, True], parity=0)]


@pytest.mark.parametrize("case,loader,parallel,policy", RECORD_MATRIX,
                         ids=[f"{c}-{l}-{'parallel' if p else 'serial'}-{o}" for c, l, p, o in RECORD_MATRIX])
def test_records_that_disagree_with_the_manifest_always_fail(datasets, case, loader, parallel, policy):
    codes, error, _ = run(config(datasets[case, False], loader, parallel, policy))
    assert error is not None, "never skipped"
    problem = error.problems[0]
    assert problem.file.endswith("a.tfrecords") and problem.path == f"record {BAD}"
    named = "r" if case.startswith("raw") else "x"  # the feature that disagrees, named as a word
    assert re.search(rf"(?<![\w.]){named}(?![\w.])", problem.message), problem.message
    a_seen = [c for c in codes if c < 200]
    # Nothing from the bad record on. The independent loader parses fixed-size features a block at a
    # time where they are read, so its error can come before batches of the bad record's block.
    assert a_seen == a_codes(len(a_seen)) and len(a_seen) <= BAD


VANISH = [(loader, parallel, policy) for loader in LOADERS for parallel in (False, True)
          for policy in ("fail", "skip_file")]


@pytest.mark.parametrize("loader,parallel,policy", VANISH,
                         ids=[f"{l}-{'parallel' if p else 'serial'}-{o}" for l, p, o in VANISH])
def test_a_file_gone_after_the_build_is_reported(tmp_path, capfd, loader, parallel, policy):
    """TF's reader retries a file it cannot open forever under ignore_errors: this hung before the bound."""
    d = make_dataset(tmp_path, "intact")
    input_fn = batchloaders.build_input_fn(config(d, loader, parallel, policy))
    dataset = input_fn()
    os.remove(os.path.join(d, "b.tfrecords"))
    codes, error = [], None
    try:
        with batchloaders.data_errors():
            for batch in dataset:
                codes += batch["x"].numpy().reshape(-1, 2)[:, 0].tolist()
    except batchloaders.DataError as e:
        error = e
    says = "before the first record: the file could not be read to its end: it cannot be opened"
    # Serial reads finish A before B's turn; parallel ones may stop A's early, in order.
    assert codes == a_codes(RECORDS if policy == "skip_file" or not parallel else len(codes))
    if policy == "fail":
        assert error.problems[0].file == os.path.join(d, "b.tfrecords") and says in str(error)
    else:
        assert error is None and input_fn.skipped().files == {os.path.join(d, "b.tfrecords"): 0}
        assert says in capfd.readouterr().err


def test_a_zlib_file_gone_after_the_build_fails_naming_it(tmp_path):
    """ZLIB files are read on the exact path, which opens each file before reading it."""
    d = str(tmp_path / "data")  # beside the template dataset, not above it (a dir dataset reads subfolders)
    write_records(os.path.join(d, "a.tfrecords"), GOOD, "zlib")
    write_records(os.path.join(d, "b.tfrecords"), [record(B, r) for r in range(RECORDS)], "zlib")
    make_dataset(tmp_path / "plain", "intact")
    with open(tmp_path / "plain" / "intact" / "__manifest__.json") as f:
        manifest = json.load(f)
    with open(os.path.join(d, "__manifest__.json"), "w") as f:
        json.dump({**manifest, "compression": "zlib"}, f)
    dataset = batchloaders.build_input_fn(config(d, "independent", False, "fail"))()
    os.remove(os.path.join(d, "b.tfrecords"))
    with pytest.raises(batchloaders.DataError) as caught:
        with batchloaders.data_errors():
            for _ in dataset:
                pass
    problem = caught.value.problems[0]
    assert (problem.file, problem.path) == (os.path.join(d, "b.tfrecords"), "open")
    assert problem.message.startswith("the data file cannot be opened: No such file or directory")


def test_a_file_that_cannot_be_opened_stops_the_ignoring_reader(tmp_path):
    """The race after the probe: the bounded reader gives up after ``limit`` tries instead of spinning."""
    from batchloaders.read.integrity import _bounded

    gone = tf.data.TFRecordDataset(str(tmp_path / "gone.tfrecords"))
    assert list(_bounded(gone, tf.constant(5, tf.int64))) == []
    write_records(str(tmp_path / "here.tfrecords"), [b"r0", b"r1", b"r2"])
    here = tf.data.TFRecordDataset(str(tmp_path / "here.tfrecords"))
    assert [(n.numpy(), r.numpy()) for n, r in _bounded(here, tf.constant(5, tf.int64))] == [
        (0, b"r0"), (1, b"r1"), (2, b"r2")]
    assert [(n.numpy(), r.numpy()) for n, r in _bounded(here, tf.constant(2, tf.int64))] == [(0, b"r0"), (1, b"r1")]


@pytest.mark.parametrize("payload", [b"\x0a\x05ab", b"\xff\xff\xff\xff"], ids=["cut protobuf", "not UTF-8"])
@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_a_record_that_is_no_protobuf_is_a_data_error(tmp_path, loader, payload):
    """TensorFlow's parser names no record here (and its error may not even decode): still a DataError."""
    d = make_dataset(tmp_path, "intact")
    write_records(os.path.join(d, "a.tfrecords"), GOOD[:BAD] + [payload] + GOOD[BAD + 1:])
    codes, error, _ = run(config(d, loader, False, "fail"))
    assert error is not None and error.problems[0].path == "record"
    assert "not a tf.train.Example or SequenceExample protobuf" in str(error)
    assert codes == a_codes(len(codes)) and len(codes) <= BAD


@pytest.mark.parametrize("parallel", [False, True], ids=["serial", "parallel"])
def test_more_records_than_the_manifest_lists_is_a_data_error(tmp_path, parallel):
    """Without size_bytes nothing catches this at build; the reader does, at the block that passes the count,
    naming the file (it used to deliver the extra records, or name only the manifest's $.files)."""
    d = make_dataset(tmp_path, "intact", counts=True)
    write_records(os.path.join(d, "a.tfrecords"), GOOD + [record(A, RECORDS), record(A, RECORDS + 1)])
    codes, error, _ = run(config(d, "independent", parallel, "fail"))
    problem, = error.problems
    assert (problem.file, problem.path) == (os.path.join(d, "a.tfrecords"), f"record {RECORDS}")
    assert problem.message.startswith(f"the manifest {os.path.join(d, '__manifest__.json')} lists 6 records for this "
                                      "file, but it holds more (records were added after the manifest was written")
    assert not set(codes) & {100 * A + RECORDS, 100 * A + RECORDS + 1}  # nothing past the count


LONG, DAMAGED = 2600, 2500  # three blocks of up to 1024 records; the damage in the third


@pytest.mark.parametrize("policy", ["fail", "skip_file"])
@pytest.mark.parametrize("loader", ["independent", "discrete_sequence"])
def test_damage_in_a_later_block_delivers_every_record_before_it_once(tmp_path, loader, policy):
    """The fast reader drops the block an error happens in; the records after the last whole block are
    read again up to the damage, each exactly once."""
    d = make_dataset(tmp_path, "intact")
    os.remove(os.path.join(d, "b.tfrecords"))
    records = [record(0, i) for i in range(LONG)]
    data = framed(records)
    with open(os.path.join(d, "a.tfrecords"), "wb") as f:
        f.write(flip(data, frame_offsets(records)[DAMAGED] + 12 + 4))
    cfg = config(d, loader, False, policy)
    cfg["args"]["target_batch_size"] = 100
    codes, error, input_fn = run(cfg)
    assert codes == list(range(DAMAGED))
    if policy == "fail":
        assert f"after record {DAMAGED - 1} " in error.problems[0].path
    else:
        assert error is None and input_fn.skipped().files == {os.path.join(d, "a.tfrecords"): DAMAGED}


@pytest.mark.parametrize("case", ["record missing a feature", "raw feature with the wrong byte length"])
@pytest.mark.parametrize("loader,parallel,parses,records,bad", [
    ("independent", False, None, LONG, DAMAGED), ("independent", True, None, LONG, DAMAGED),
    ("independent", True, 1, LONG, DAMAGED),  # parsed where read, in an inline map (inline_map.py)
    ("discrete_sequence", False, None, LONG, DAMAGED),
    # blocks of 4096 records of 2 steps: the bad record is in the third block
    ("continuous_sequence", True, None, 9000, 8500), ("continuous_sequence", True, 1, 9000, 8500)])
def test_a_bad_record_in_a_later_block_is_named_by_its_number_in_the_file(tmp_path, case, loader, parallel,
                                                                          parses, records, bad):
    """Blocks name their records '@N:F+j' (N the file's token); the error gives the record's number in the file."""
    d = make_dataset(tmp_path, "intact")
    data = [record(0, i) for i in range(records)]
    data[bad] = {"record missing a feature": record(0, bad, x=None),
                 "raw feature with the wrong byte length": record(0, bad, r=("string", [b"abc"]))}[case]
    write_records(os.path.join(d, "a.tfrecords"), data)
    cfg = config(d, loader, parallel, "fail")
    cfg["args"]["target_batch_size"] = 100
    if parses is not None:
        cfg["args"]["num_parallel_parses"] = parses
    _, error, _ = run(cfg)
    problem = error.problems[0]
    assert problem.file == os.path.join(d, "a.tfrecords") and problem.path == f"record {bad}", str(error)


@pytest.mark.parametrize("parallel", [False, True], ids=["map stage", "parsed where read, inline"])
def test_raw_length_error_says_what_the_manifest_expects(datasets, parallel):
    _, error, _ = run(config(datasets["raw feature with the wrong byte length", False], "independent", parallel,
                             "fail"))
    assert str(error) == (f"{os.path.join(datasets['raw feature with the wrong byte length', False], 'a.tfrecords')}"
                          ": record 3: feature r holds 3 bytes: the manifest says deserialize_type raw, dtype uint8, "
                          "shape [2], which takes 2 bytes per byte string")


def test_gzip_sizes_are_taken_from_the_trailer(tmp_path):
    """The trailer check reads ISIZE; an intact GZIP dataset passes it (no false alarm)."""
    d = make_dataset(tmp_path, "intact")
    for name in ("a.tfrecords", "b.tfrecords"):
        path = os.path.join(d, name)
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(gzip.compress(data))
        assert struct.unpack("<I", gzip.compress(data)[-4:])[0] == len(data)
    manifest = json.load(open(os.path.join(d, "__manifest__.json")))
    manifest["compression"] = "gzip"
    json.dump(manifest, open(os.path.join(d, "__manifest__.json"), "w"))
    codes, error, _ = run(config(d, "independent", False, "fail"))
    assert error is None and codes == a_codes(RECORDS) + B_CODES


# What the offline tools say of file A. check-data reads the first records only (8 by default, all 6
# here): what ends a file without an error is for verify, which needs the counts for a file cut at a
# record boundary or emptied.
CHECK_DATA_MISSES = {"intact", "truncated inside a header", "truncated at a boundary", "empty file",
                     "GZIP missing its trailer", "two GZIP streams in one file"}
VERIFY_MISSES_WITHOUT_COUNTS = {"intact", "truncated at a boundary", "empty file"}
TOOL_SAYS = {
    "truncated mid-payload": "record 3 at byte 132: cannot be read (the data ends inside the record that starts at byte 132)",
    "truncated inside a header": "the file is 137 bytes, but its 3 records end at byte 132",
    "truncated at a boundary": "the manifest lists 6 records for this file",
    "flipped byte in length": "record 3 at byte 132: cannot be read (corrupted record at 132)",
    "flipped byte in length checksum": "record 3 at byte 132: cannot be read (corrupted record at 132)",
    "flipped byte in payload": "record 3 at byte 132: cannot be read (corrupted record at 144)",
    "flipped byte in payload checksum": "record 3 at byte 132: cannot be read (corrupted record at 144)",
    "garbage appended": "record 6 at byte 264: cannot be read",
    "empty file": "the manifest lists 6 records for this file",
    "not a TFRecord file": "not a TFRecord file",
    "GZIP read without compression": "the file is GZIP-compressed, but the manifest says compression null",
    "uncompressed read as GZIP": "the file is not compressed, but the manifest says compression 'gzip'",
    "damaged GZIP": "record 0 at byte 0 of the uncompressed stream: cannot be read",
    "GZIP missing its trailer": "the GZIP stream ends before its end marker",
    "GZIP cut short": "record 0 at byte 0 of the uncompressed stream: cannot be read",
    "two GZIP streams in one file": "the file holds 2 GZIP streams one after the other",
    "record missing a feature": "record 3: feature 'x': the manifest says int (int64_list) of shape [2]",
    "record with the wrong stored type": "record 3: feature 'x': the manifest says int (int64_list) of shape [2]",
    "raw feature with the wrong byte length": "record 3: feature 'r': the manifest says raw uint8 of shape [2]",
    "shape that disagrees with the manifest": "record 3: feature 'x': the manifest says int (int64_list) of shape [2]",
    "SequenceExample read as Example": "record 3: holds feature lists ('x'), so it is a tf.train.SequenceExample",
}
TOOL_CASES = [(case, counts) for case in list(FILE_CASES) + list(RECORD_CASES) for counts in (False, True)]


@pytest.mark.parametrize("case,counts", TOOL_CASES, ids=[f"{c}-{'counts' if n else 'no counts'}"
                                                         for c, n in TOOL_CASES])
def test_check_data_and_verify_on_the_matrix(datasets, case, counts):
    import io

    from batchloaders.cli import check_data, verify

    d = datasets[case, counts]
    manifest = batchloaders.load_manifest(os.path.join(d, "__manifest__.json"))
    _, problems = check_data.check_file(os.path.join(d, "a.tfrecords"), manifest)
    if case in CHECK_DATA_MISSES:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith(TOOL_SAYS[case]), problems
    out = io.StringIO()
    status = verify.run(d, out, io.StringIO())
    lines = out.getvalue().splitlines()
    assert f"OK {os.path.join(d, 'b.tfrecords')} (6 records)" in lines
    if case == "intact" or (case in VERIFY_MISSES_WITHOUT_COUNTS and not counts):
        assert status == 0 and lines[-1] == "0 of 2 files have problems"
        return
    assert status == 1 and lines[-1] == "1 of 2 files have problems"
    a_lines = [line for line in lines if line.startswith(os.path.join(d, "a.tfrecords") + ": ")]
    assert a_lines and TOOL_SAYS[case] in a_lines[0], lines


def kindless(serialized: bytes) -> bytes:
    """The record with feature x present but holding no list at all (TensorFlow reports it as missing)."""
    proto = tf.train.Example.FromString(serialized)
    proto.features.feature["x"].Clear()
    return proto.SerializeToString()


@pytest.mark.parametrize("compression, damage", [(None, "absent"), ("gzip", "absent"), (None, "kindless")])
def test_a_missing_feature_deep_in_a_block_is_named_by_its_record(tmp_path, compression, damage):
    """Blocks of fixed-size records are named as blocks (naming.py); TensorFlow's missing-feature error
    names no record, so the block is read again to find it (here the second block, and compressed)."""
    d = str(tmp_path / "data")  # beside the template dataset, not above it (a dir dataset reads subfolders)
    make_dataset(tmp_path / "plain", "intact")
    bad = 1050
    broken = record(A, bad, x=None) if damage == "absent" else kindless(record(A, bad))
    write_records(os.path.join(d, "a.tfrecords"), [broken if r == bad else record(A, r) for r in range(1100)],
                  compression)
    write_records(os.path.join(d, "b.tfrecords"), [record(B, r) for r in range(RECORDS)], compression)
    with open(tmp_path / "plain" / "intact" / "__manifest__.json") as f:
        manifest = json.load(f)
    with open(os.path.join(d, "__manifest__.json"), "w") as f:
        json.dump({**manifest, "compression": compression}, f)
    codes, error, _ = run(config(d, "independent", False, "fail"))
    problem = error.problems[0]
    assert (problem.file, problem.path) == (os.path.join(d, "a.tfrecords"), f"record {bad}")
    found = "no such feature" if damage == "absent" else "a feature with no value list"
    assert problem.message == (f"feature 'x': the manifest {os.path.join(d, '__manifest__.json')} says int (int64_list) "
                               f"of shape [2] (2 values), found {found}")
    assert codes == [100 * A + r for r in range(len(codes))] and len(codes) < bad


def test_a_block_error_that_cannot_be_read_again_names_the_block(tmp_path):
    """The block's file gone by the time the error is read: the records of the block, not a guess."""
    message = ("{{function_node __wrapped__ParseExampleV2}} Name: /gone/a.tfrecords: records 1024..2047, Feature: x "
               "(data type: int64) is required but could not be found. [Op:ParseExampleV2]")
    error = batchloaders.data_error_from(tf.errors.InvalidArgumentError(None, None, message))
    assert (error.problems[0].file, error.problems[0].path) == ("/gone/a.tfrecords", "one of records 1024 to 2047")
    indexed = message.replace("Feature: x (data type: int64) is required but could not be found",
                              "Key: x, Index: 17.  Data types don't match. Data type: float but expected type: int64")
    error = batchloaders.data_error_from(tf.errors.InvalidArgumentError(None, None, indexed))
    assert (error.problems[0].file, error.problems[0].path) == ("/gone/a.tfrecords", "record 1041")


@pytest.mark.parametrize("policy", ["fail", "skip_file"])
def test_a_damaged_zlib_file_is_caught_at_its_end_on_the_exact_path(tmp_path, capfd, policy):
    """ZLIB sizes cannot be checked: the exact path numbers records around ignore_errors, and the check at the
    file's end reports the gap after the good records (3 of them: the stream is cut inside record 3)."""
    from batchloaders.read.integrity import exact_path, file_table

    d = str(tmp_path / "zlib")
    path = write_records(os.path.join(d, "a.tfrecords"), GOOD, "zlib")
    write_records(os.path.join(d, "b.tfrecords"), [record(B, r) for r in range(RECORDS)], "zlib")
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:len(data) * 2 // 3])  # the stream ends inside a record
    make_dataset(tmp_path / "plain", "intact")
    with open(tmp_path / "plain" / "intact" / "__manifest__.json") as f:
        manifest = json.load(f)
    with open(os.path.join(d, "__manifest__.json"), "w") as f:
        json.dump({**manifest, "compression": "zlib"}, f)
    cfg = config(d, "independent", False, policy)
    assert exact_path(file_table(batchloaders.load_config(cfg)))
    codes, error, input_fn = run(cfg)
    if policy == "fail":
        assert codes == a_codes(3) and error.problems[0].file == path
        assert "after record 2 " in error.problems[0].path and "the ZLIB stream is damaged" in str(error)
    else:
        assert error is None and codes == a_codes(3) + B_CODES
        assert input_fn.skipped().files == {path: 3}
        warnings = [line for line in capfd.readouterr().err.splitlines() if "WARNING" in line]
        assert len(warnings) == 1 and path in warnings[0] and "the ZLIB stream is damaged" in warnings[0]
        assert "after record 2 " in warnings[0] and "(3 records read from it)" in warnings[0]
