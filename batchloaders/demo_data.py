"""Example datasets for the configs in configs/, made from English text every Python ships.

The text is the reference documentation in ``pydoc_data.topics`` (about 460 kB
of prose), so the demo models learn real structure and their loss visibly
falls. Nothing is downloaded. Bytes are the vocabulary (ids 1..255; 0 pads).
"""
from __future__ import annotations

import os
import re
import shutil

import tensorflow as tf

from batchloaders.prepare.manifest import write_manifest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTEXT = 16  # characters of context in the independent example
CHUNK = 64  # characters per record in the continuous example
FILES = 4


def corpus() -> list[str]:
    """The documentation topics as plain ASCII text, split into FILES groups."""
    from pydoc_data.topics import topics

    texts = [re.sub(r"[^\x01-\x7f]", "?", topics[k]) for k in sorted(topics)]
    groups = [""] * FILES
    for i, text in enumerate(texts):
        groups[i % FILES] += text + "\n"
    return groups


def _ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def _manifest(name: str) -> str:
    return os.path.join(ROOT, "manifests", name)


def write_chars(out: str, groups: list[str], per_file: int = 6000) -> None:
    """independent: each record is (16 characters of context, the next character)."""
    os.makedirs(out, exist_ok=True)
    shutil.copy(_manifest("chars.manifest.json"), os.path.join(out, "__manifest__.json"))
    for f, text in enumerate(groups):
        data = text.encode("ascii")
        step = max(1, (len(data) - CONTEXT - 1) // per_file)
        with tf.io.TFRecordWriter(os.path.join(out, f"chars-{f}.tfrecords")) as w:
            for start in range(0, len(data) - CONTEXT - 1, step)[:per_file]:
                example = tf.train.Example(features=tf.train.Features(feature={
                    "context": _ints(data[start:start + CONTEXT]),
                    "next": _ints([data[start + CONTEXT]])}))
                w.write(example.SerializeToString())


def zen() -> str:
    """The Zen of Python as plain text (the ``this`` module prints it when imported: its source is read instead)."""
    import codecs
    import importlib.util

    source = open(importlib.util.find_spec("this").origin, encoding="utf-8").read()
    return codecs.decode(re.search(r's = """(.*?)"""', source, re.S).group(1), "rot13")


def write_stream(out: str, groups: list[str]) -> str:
    """continuous_sequence: each file is one long text, each record a 64-character chunk."""
    os.makedirs(out, exist_ok=True)
    paths = []
    for f, text in enumerate(groups):
        data = text.encode("ascii")
        path = os.path.join(out, f"stream-{f}.tfrecords")
        options = tf.io.TFRecordOptions(compression_type="GZIP")
        with tf.io.TFRecordWriter(path, options) as w:
            for start in range(0, len(data) - CHUNK + 1, CHUNK):
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "text": _ints(data[start:start + CHUNK])})).SerializeToString())
        paths.append(os.path.basename(path))
    list_file = os.path.join(out, "stream.list")
    with open(list_file, "w") as f:
        f.write("".join(p + "\n" for p in paths))
    return list_file


def split_sentences(text: str) -> list[bytes]:
    """The records of one sentence file: each sentence (at most 200 characters) and a space."""
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if s.strip()]
    return [s.encode("ascii")[:200] + b" " for s in sentences]


def write_sentences(out: str, groups: list[str]) -> None:
    """discrete_sequence: each file is one text, each record one sentence (a SequenceExample)."""
    os.makedirs(out, exist_ok=True)
    shutil.copy(_manifest("sentences.manifest.json"), os.path.join(out, "__manifest__.json"))
    for f, text in enumerate(groups):
        with tf.io.TFRecordWriter(os.path.join(out, f"sentences-{f}.tfrecords")) as w:
            for chars in split_sentences(text):
                record = tf.train.SequenceExample(
                    context=tf.train.Features(feature={"words": _ints([len(chars.split())])}),
                    feature_lists=tf.train.FeatureLists(feature_list={
                        "chars": tf.train.FeatureList(feature=[_ints([c]) for c in chars])}))
                w.write(record.SerializeToString())


def record_files(directory: str) -> None:
    """Add every file's record count, size and SHA-256 to a dataset's manifest (``batchloaders manifest``)."""
    write_manifest(directory)


def generate(root: str | None = None) -> str:
    """Write every example dataset under ``root`` (default: demo_data/ in the repo); return root."""
    root = root or os.path.join(ROOT, "demo_data")
    stamp = os.path.join(root, ".complete")
    if os.path.exists(stamp):
        return root
    os.makedirs(root, exist_ok=True)
    # Several processes (parallel test workers, a demo beside a test run) may ask at once: one writes.
    with open(os.path.join(root, ".lock"), "w") as lock:
        try:
            import fcntl

            fcntl.flock(lock, fcntl.LOCK_EX)
        except ImportError:  # not POSIX: no lock, as before
            pass
        if not os.path.exists(stamp):
            _write_all(root)
            open(stamp, "w").close()
    return root


def _write_all(root: str) -> None:
    groups = corpus()
    write_chars(os.path.join(root, "chars"), groups)
    write_stream(os.path.join(root, "stream"), groups)
    write_sentences(os.path.join(root, "sentences"), groups)
    # A second, small corpus of the same features: configs/chars_mixture.yaml mixes it with chars.
    write_chars(os.path.join(root, "zen"), [zen()], per_file=800)
    record_files(os.path.join(root, "zen"))
    record_files(os.path.join(root, "chars"))
    # The chars files get record indexes too: configs/chars_global.yaml shuffles them globally.
    from batchloaders.prepare.index import write_index  # deferred: only when the data is written

    write_index(os.path.join(root, "chars"))
    record_files(os.path.join(root, "sentences"))
