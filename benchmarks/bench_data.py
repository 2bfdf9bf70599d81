"""The benchmark data matrix, written once into benchmarks/data/ (gitignored).

Four datasets of ``FILES`` files each, seeded, every file holding the same
number of records. Each directory has a ``__manifest__.json`` in the format
README.md describes, with the ``files`` accounting (``num_records``,
``size_bytes``, ``sha256``) that ``batchloaders manifest`` would write:

* ``floats``: Examples, ``x`` = 64 float32 (float list) + ``label`` int64.
* ``raw_floats``: the same values, ``x`` stored as 256 raw little-endian bytes.
* ``images``: ``image`` = 32x32x3 uint8 raw bytes (3 KB) + ``label`` int64.
* ``speech``: SequenceExamples of 20..200 frames (lognormal, median 97,
  clipped: a long tail at 200), feature lists ``frames`` (40 float32 per frame)
  and ``labels`` (one int64 per frame, 1..48, never 0, so that the non-zero
  labels of a padded batch count its frames); ~19 KB per record.

Records are encoded directly in the protobuf wire format (numpy does the
per-frame work, so writing is fast); the first record of every file is parsed
back with ``tf.train`` and checked. Change ``VERSION`` when anything here
changes: the data is rewritten on the next run.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np

VERSION = "3"
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
FILES = 16
SEED = 20261123
# Sizes: one epoch of our pipeline takes >= ~2 s on 2 cores in every case.
FLOATS_PER_FILE = 60_000
IMAGES_PER_FILE = 36_000
SPEECH_PER_FILE = 7_500
FRAME = 40  # floats per speech frame
LABELS = 48  # speech labels are 1..LABELS


# --- protobuf wire format (tf.train.Example / SequenceExample), just what is needed -----------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, payload."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def float_feature(values: np.ndarray) -> bytes:  # Feature.float_list (2) -> FloatList.value (1), packed
    return _field(2, _field(1, np.asarray(values, "<f4").tobytes()))


def int_feature(values) -> bytes:  # Feature.int64_list (3) -> Int64List.value (1), packed; values >= 0
    return _field(3, _field(1, b"".join(_varint(int(v)) for v in values)))


def bytes_feature(value: bytes) -> bytes:  # Feature.bytes_list (1) -> BytesList.value (1)
    return _field(1, _field(1, value))


def _map(features: dict[str, bytes]) -> bytes:
    """A map<string, message> field 1: one (key 1, value 2) entry per item."""
    return b"".join(_field(1, _field(1, k.encode()) + _field(2, v)) for k, v in features.items())


def example(**features: bytes) -> bytes:  # Example.features (1) -> Features.feature (map, 1)
    return _field(1, _map(features))


def sequence_example(feature_lists: dict[str, bytes]) -> bytes:
    """``feature_lists``: name -> a FeatureList's bytes (see ``frame_list``). No context."""
    return _field(2, _map(feature_lists))  # SequenceExample.feature_lists (2) -> FeatureLists (map, 1)


def frame_list(features: np.ndarray, feature_of) -> bytes:
    """A FeatureList (repeated Feature, field 1) of one fixed-size Feature per row, built with numpy.

    ``feature_of(row)`` encodes one row; rows encode to the same length, so the
    bytes before the row's own bytes (the prefix) are the same for every row.
    """
    rows = np.ascontiguousarray(features).view(np.uint8).reshape(len(features), -1)
    one = _field(1, feature_of(features[0]))
    prefix = np.frombuffer(one[:len(one) - rows.shape[1]], np.uint8)
    return np.hstack([np.broadcast_to(prefix, (len(rows), len(prefix))), rows]).tobytes()


# --- datasets -----------------------------------------------------------------------------------

def _feature(name, dtype, shape, kind, var_len=None, **args) -> dict:
    out = {"name": name, "dtype": dtype, "shape": list(shape), "deserialize_type": kind}
    if var_len is not None:
        out["var_len"] = var_len
    if args:
        out["deserialize_args"] = args
    return out


def _rng(dataset: str, i: int) -> np.random.Generator:
    return np.random.default_rng([SEED, i, sum(dataset.encode())])


def _floats(i: int):
    """The 64 floats and labels of file i, shared by ``floats`` and ``raw_floats``."""
    rng = _rng("floats", i)
    return rng.standard_normal((FLOATS_PER_FILE, 64), dtype=np.float32), rng.integers(0, 1000, FLOATS_PER_FILE)


def floats_records(i):
    x, labels = _floats(i)
    return [example(x=float_feature(row), label=int_feature([y])) for row, y in zip(x, labels)], (x[0], labels[0])


def raw_floats_records(i):
    x, labels = _floats(i)
    x = x.astype("<f4")
    return [example(x=bytes_feature(row.tobytes()), label=int_feature([y])) for row, y in zip(x, labels)], \
        (x[0], labels[0])


def images_records(i):
    rng = _rng("images", i)
    images = rng.integers(0, 256, (IMAGES_PER_FILE, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 1000, IMAGES_PER_FILE)
    return [example(image=bytes_feature(im.tobytes()), label=int_feature([y])) for im, y in zip(images, labels)], \
        (images[0], labels[0])


def speech_lengths(rng, n: int) -> np.ndarray:
    return np.clip(np.round(rng.lognormal(np.log(97), 0.45, n)), 20, 200).astype(np.int64)


def speech_records(i):
    rng = _rng("speech", i)
    out, first = [], None
    for t in speech_lengths(rng, SPEECH_PER_FILE):
        frames = rng.standard_normal((t, FRAME), dtype=np.float32)
        labels = rng.integers(1, LABELS + 1, t).astype(np.uint8)  # < 128: one varint byte each
        out.append(sequence_example({"frames": frame_list(frames, float_feature),
                                     "labels": frame_list(labels[:, None], int_feature)}))
        first = first or (frames, labels)
    return out, first


def _check(name: str, record: bytes, first) -> None:
    """Parse a written record back with tf.train and compare with the values it was made from."""
    import tensorflow as tf

    def same(a, b):
        if not np.array_equal(np.asarray(a).ravel(), np.asarray(b).ravel()):
            raise AssertionError(f"benchmarks/data/{name}: the protobuf encoder wrote wrong bytes")

    if name == "speech":
        lists = tf.train.SequenceExample.FromString(record).feature_lists.feature_list
        same([v for f in lists["frames"].feature for v in f.float_list.value], first[0])
        same([v for f in lists["labels"].feature for v in f.int64_list.value], first[1])
        return
    features = tf.train.Example.FromString(record).features.feature
    values, label = first
    if name == "floats":
        same(features["x"].float_list.value, values)
    else:
        key = "x" if name == "raw_floats" else "image"
        same(np.frombuffer(features[key].bytes_list.value[0], values.dtype), values)
    same(features["label"].int64_list.value, [label])


DATASETS = {
    "floats": (floats_records, False, [_feature("x", "float32", [64], "float"),
                                       _feature("label", "int64", [], "int")]),
    "raw_floats": (raw_floats_records, False, [_feature("x", "float32", [64], "raw", endian="little"),
                                               _feature("label", "int64", [], "int")]),
    "images": (images_records, False, [_feature("image", "uint8", [32, 32, 3], "raw", endian="little"),
                                       _feature("label", "int64", [], "int")]),
    "speech": (speech_records, True, [_feature("frames", "float32", [FRAME], "float", var_len=True),
                                      _feature("labels", "int64", [], "int", var_len=True)]),
}


def write(name: str) -> None:
    import tensorflow as tf

    make, allow_var_len, features = DATASETS[name]
    directory = os.path.join(ROOT, name)
    os.makedirs(directory, exist_ok=True)
    entries = []
    for i in range(FILES):
        records, first = make(i)
        _check(name, records[0], first)
        file_name = f"part-{i:02d}.tfrecords"
        path = os.path.join(directory, file_name)
        with tf.io.TFRecordWriter(path) as writer:
            for record in records:
                writer.write(record)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        entries.append({"name": file_name, "num_records": len(records), "size_bytes": os.path.getsize(path),
                        "sha256": digest})
    with open(os.path.join(directory, "__manifest__.json"), "w") as f:
        json.dump({"compression": None, "allow_var_len": allow_var_len, "features": features, "files": entries},
                  f, indent=1)
        f.write("\n")


def generate(log=print) -> dict[str, str]:
    """Write the datasets when missing or stale (VERSION); return {name: directory}."""
    stamp = os.path.join(ROOT, ".complete")
    current = os.path.exists(stamp) and open(stamp).read().strip() == VERSION
    if not current:
        shutil.rmtree(ROOT, ignore_errors=True)
        for name in DATASETS:
            log(f"writing benchmarks/data/{name} ({FILES} files) ...")
            write(name)
        with open(stamp, "w") as f:
            f.write(VERSION + "\n")
    return {name: os.path.join(ROOT, name) for name in DATASETS}


def files(directory: str) -> list[str]:
    """A dataset's data files in the order the ``dir`` dataset reads them (sorted; the directory is flat)."""
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".tfrecords"))
