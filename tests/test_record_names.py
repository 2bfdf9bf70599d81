"""read/naming.py is the one writer and the one reader of record names ('path: record N' and its block
forms): what each writer makes, the reader reads back as the same records, and runtime/translate.py reads
the names inside TensorFlow's and the pipeline's own messages through it."""
from __future__ import annotations

import base64
import hashlib
import pathlib
import re

import pytest
import tensorflow as tf

import batchloaders
import batchloaders.errors
from batchloaders.read import naming
from batchloaders.runtime import translate
from conftest import example, feature, loader_config, write_manifest, write_records

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "batchloaders"
PATH = "/data/a: b/train-0.tfrecords"  # ': ' inside the path: the name's own separator must still be found


def _text(tensor) -> list[str]:
    return [s.decode() for s in tf.reshape(tensor, [-1]).numpy().tolist()]


# (what a writer made, the records it names: (path, first, last))
WRITTEN = [
    (lambda: [naming.record_name(PATH, 7)], [(PATH, 7, 7)]),
    (lambda: _text(tf.strings.join(naming.record_name_parts(tf.constant(PATH), tf.constant(12, tf.int64)))),
     [(PATH, 12, 12)]),
    (lambda: _text(naming.record_names([PATH, "/b"], tf.constant([1, 0]), tf.constant([3, 4])).vector()),
     [("/b", 3, 3), (PATH, 4, 4)]),
    (lambda: _text(naming.EachInBlock(tf.constant(PATH), tf.constant(naming.token(PATH)), tf.constant(100, tf.int64),
                                      tf.constant(3), 8).vector()),
     [(PATH, 100, 100), (PATH, 101, 101), (PATH, 102, 102)]),
    (lambda: _text(naming.EachInBlock(tf.constant(PATH), tf.constant(naming.token(PATH)), tf.constant(100, tf.int64),
                                      tf.constant(3), 8).at(2)),
     [(PATH, 102, 102)]),
    (lambda: _text(naming.record_names([PATH, "/b"], tf.constant([1, 0]), tf.constant([3, 4])).at(1)),
     [(PATH, 4, 4)]),
    (lambda: _text(naming.BlockNames(tf.constant(PATH), tf.constant(10, tf.int64), tf.constant(2)).vector()),
     [(PATH, 10, 11), (PATH, 10, 11)]),
    (lambda: _text(naming.BlockNames(tf.constant(PATH), tf.constant(10, tf.int64), tf.constant(2)).at(1)),
     [(PATH, 11, 11)]),
    (lambda: _text(naming.BlockNames(tf.constant(PATH), tf.constant(10, tf.int64), tf.constant(2),
                                     tf.constant(naming.token(PATH))).vector()),
     [(PATH, 10, 11), (PATH, 10, 11)]),
]


@pytest.mark.parametrize("write, expected", WRITTEN)
def test_every_written_name_reads_back_as_its_records(write, expected):
    read = [naming.parse(name) for name in write()]
    assert [(n.path, n.first, n.last) for n in read] == expected


def test_a_token_stands_for_one_path_and_is_short():
    """The parse ops copy a block's name once per record: with the token it is short enough for TensorFlow's
    strings to hold in place (22 bytes) whatever the path's length, up to records numbered in the ten thousands."""
    long_path = "/data/" + "d" * 200 + "/train-00001-of-01024.tfrecords"
    written = _text(naming.BlockNames(tf.constant(long_path), tf.constant(10_240, tf.int64), tf.constant(1024),
                                      tf.constant(naming.token(long_path))).vector())
    assert set(written) == {f"{naming.token(long_path)}:10240..11263"} and len(written[0]) <= 22
    assert naming.token(long_path) == naming.token(long_path) != naming.token(PATH)
    # Feature lists' records are named one by one (their parse errors do not say the record's place), as short.
    each = _text(naming.EachInBlock(tf.constant(long_path), tf.constant(naming.token(long_path)),
                                    tf.constant(10_240, tf.int64), tf.constant(1024), 1024).vector())
    assert each[1023] == f"{naming.token(long_path)}:10240+1023" and max(map(len, each)) <= 22
    assert (naming.parse(each[1023]).path, naming.parse(each[1023]).record) == (long_path, 11_263)
    assert (naming.parse(written[0]).path, naming.parse(written[0]).first) == (long_path, 10_240)
    # A token no graph of this process wrote (another process's): no path is made up for it.
    assert naming.parse("@zzzzzzz:0..9").path == naming.UNKNOWN
    # The same path has the same token in every process (a hash): pipelines built in another order make the
    # same graph (a tf.data service job shared by several trainers must be the same dataset).
    assert naming.token(long_path) == "@" + base64.b32encode(hashlib.sha256(long_path.encode()).digest()).decode(
    )[:7].lower()
    # An error naming the block by its token names the file (Keras's wrapper converts only errors naming ours).
    assert naming.mentions(f"Name: {written[0]}, Key: x, Index: 3.", long_path)
    assert not naming.mentions("Name: @zzzzzzz:0..9, Key: x", long_path)


def test_a_string_that_is_no_record_name_reads_as_none():
    assert [naming.parse(s) for s in ("a file", "x: record", "x: record 3 of 4", "x: records 1..", "")] == [None] * 5
    assert naming.parse("x: record 3").record == 3 and naming.parse("x: records 3..4").record is None


def _tf_error(message: str) -> tf.errors.InvalidArgumentError:
    return tf.errors.InvalidArgumentError(None, None, message)


# (TensorFlow's message with a written name in it, the problem data_error_from makes of it)
MESSAGES = [
    (f"assertion failed: [{naming.record_name(PATH, 5)}: feature 'x' has 3 values]\n\t [[{{node Assert}}]]",
     f"{PATH}: record 5: feature 'x' has 3 values"),
    (f"assertion failed: [{PATH}: record 5+2: feature 'x' has 3 values] [Op:Assert]",
     f"{PATH}: record 7: feature 'x' has 3 values"),
    (f"assertion failed: [{PATH}: {naming.MARKER} at byte 40, after record 2 (the last good one; records count "
     "from 0): the file is cut]\n",
     f"{PATH}: {naming.MARKER} at byte 40, after record 2 (the last good one; records count from 0): the file is cut"),
    (f"Name: {PATH}: record 9, Key: x, Index: 0.  Number of float values != expected.\n",
     f"{PATH}: record 9: the record disagrees with the manifest: Key: x, Index: 0. Number of float values != "
     "expected."),
    (f"Name: {PATH}: records 20..29, Key: x, Index: 4.  Number of float values != expected. [Op:ParseExample]",
     f"{PATH}: record 24: the record disagrees with the manifest: Key: x, Index: 4. Number of float values != "
     "expected."),
    (f"Name: {naming.token(PATH)}:20..29, Key: x, Index: 4.  Number of float values != expected. [Op:ParseExample]",
     f"{PATH}: record 24: the record disagrees with the manifest: Key: x, Index: 4. Number of float values != "
     "expected."),
    (f"Name: {naming.token(PATH)}:9, Key: x, Index: 0.  Number of float values != expected.\n",
     f"{PATH}: record 9: the record disagrees with the manifest: Key: x, Index: 0. Number of float values != "
     "expected."),
    # continuous_sequence's check of feature-list lengths: the records that differ by name, then their lengths.
    (f"assertion failed: [{PATH}: the selected feature lists of a record differ in length (x, y): the records, "
     f"then their lengths] [{naming.token(PATH)}:20+3 {naming.token(PATH)}:20+5] [[4 2][3 1]]\n\t "
     "[[{{node Assert}}]]",
     f"{PATH}: record 23: the selected features (by to_name) differ in length along the first axis (x has 4, y "
     "has 2 steps): the continuous_sequence loader concatenates records along that axis, so every selected "
     "feature needs the same length in every record"),
    # ... raised in another process (a token this one never gave): the path the message begins with.
    (f"assertion failed: [{PATH}: the selected feature lists of a record differ in length (x, y): the records, "
     "then their lengths] [@zzzzzzz:0+1] [[1 2]] [Op:Assert]",
     f"{PATH}: record 1: the selected features (by to_name) differ in length along the first axis (x has 1, y "
     "has 2 steps): the continuous_sequence loader concatenates records along that axis, so every selected "
     "feature needs the same length in every record"),
]


@pytest.mark.parametrize("message, expected", MESSAGES)
def test_translate_reads_the_names_in_messages(message, expected):
    converted = translate.data_error_from(_tf_error(message), locators=[])
    assert str(converted) == expected


def test_only_naming_writes_a_record_name():
    """No other module of the package spells out 'path: record N' (a second writer would drift from the reader)."""
    spelled = re.compile(r"""["']: record ["']|: record \{|: records \{""")
    found = [f"{path.relative_to(PACKAGE)}:{number}" for path in sorted(PACKAGE.rglob("*.py"))
             if path.name != "naming.py" for number, line in enumerate(path.read_text().splitlines(), 1)
             if spelled.search(line)]
    assert found == []


def test_the_ground_floor_holds_no_translation_of_tensorflow_errors():
    names = set(vars(batchloaders.errors))
    assert {"Problem", "BatchLoaderError", "DataError", "json_path", "path_parts", "suggest"} <= names
    assert names.isdisjoint({"data_error_from", "data_errors", "LOCATORS", "MARKER", "IMAGE_SCOPE", "SEARCH_SECONDS"})


def test_the_parse_op_gets_the_token_and_the_error_reads_back_as_the_record(tmp_path):
    """A block of one file is parsed with every record named '@token:F..L' (not the long path, copied per
    record): TensorFlow's own message carries the token, and the DataError names the file and the record."""
    write_manifest(tmp_path, [feature("y", "int64", [], "int")])
    records = [example(y=("float" if r == 5 else "int", [r])) for r in range(8)]
    path = write_records(tmp_path / "part-0.tfrecords", records)
    cfg = loader_config(tmp_path, [("y", "y")], inputs=["y"], target_batch_size=4, shuffle=False)
    located = batchloaders.build_input_fn(cfg)()
    with pytest.raises(tf.errors.InvalidArgumentError) as raw:
        list(located._input_dataset)  # noqa: SLF001 - the pipeline as TensorFlow runs it, without the translation
    assert f"Name: {naming.token(str(path))}:0..7, Key: y, Index: 5." in raw.value.message
    with pytest.raises(batchloaders.errors.DataError) as caught:
        list(located)
    assert [(p.file, p.path) for p in caught.value.problems] == [(str(path), "record 5")]
