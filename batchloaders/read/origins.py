"""Where each example was read, carried in the loader's extras for the stages that name it.

A loader asks :func:`wanted` and, when true, adds :func:`extras` of each example: its data file (the
position in the dataset's files), its record (a window's first record) and, for a continuous window, its
first step's place in that record. What is made of them is what the config's stages use:

- ``source_key``, ``'<file path>:<record index>'``: chunking's ``source_key`` feature;
- ``sequence_key``: segmenting's default key, the same plus ``':<step>'`` for a continuous window, since
  windows starting in one record are distinct sequences (state kept per key must not cross them);
- ``origin_file`` and ``origin_record`` numbers: bucketing's ``max_tokens`` check when only the data can
  tell the longest example; the numbers become a file path only in the failing check's message.
"""
from __future__ import annotations

import tensorflow as tf

from batchloaders.read import naming

from batchloaders.core.model import LoaderConfig

SOURCE_KEY, SEQUENCE_KEY, FILE, RECORD = "source_key", "sequence_key", "origin_file", "origin_record"


def _wants(config: LoaderConfig, origin: str) -> bool:
    """Whether the config's regroup stage needs ``origin`` of each example (its spec's ``origins()``)."""
    return config.regroup is not None and origin in config.regroup.origins()


def wants_source(config: LoaderConfig) -> bool:
    """Whether the loader must give each example's ``extras["source_key"]`` (a source_key feature uses it)."""
    return _wants(config, "source_key")


def source_keys(config: LoaderConfig, file_index, record) -> tf.Tensor:
    """'<file path>:<record index>' for each example, ``file_index`` its file's position in the dataset's files."""
    names = tf.gather(tf.constant(list(data_files(config))), tf.cast(file_index, tf.int32))
    return tf.strings.join([names, ":", tf.strings.as_string(tf.cast(record, tf.int64))])


def wants_sequence_key(config: LoaderConfig) -> bool:
    """Whether segmenting names each sequence by where it was read (no ``key`` tensor)."""
    return _wants(config, "sequence_key")


def wants_numbers(config: LoaderConfig) -> bool:
    """Whether bucketing checks each example against max_tokens and names the first one over it."""
    return _wants(config, "numbers")


def wanted(config: LoaderConfig) -> bool:
    """Whether the loader must give :func:`extras` of every example."""
    return wants_source(config) or wants_sequence_key(config) or wants_numbers(config)


def extras(config: LoaderConfig, file_index, record, step=None) -> dict:
    """The extras the config's stages want of examples read from files ``file_index`` [N], records
    ``record`` [N] (a window's first) and, for continuous windows, ``step`` [N] (its first step's place in
    that record)."""
    out = {}
    if wants_source(config):
        out[SOURCE_KEY] = source_keys(config, file_index, record)
    if wants_sequence_key(config):
        key = source_keys(config, file_index, record)
        out[SEQUENCE_KEY] = key if step is None else tf.strings.join([key, ":", tf.strings.as_string(step)])
    if wants_numbers(config):
        out[FILE], out[RECORD] = tf.cast(file_index, tf.int64), tf.cast(record, tf.int64)
    return out


def data_files(config: LoaderConfig) -> tuple[str, ...]:
    """The files ``extras[FILE]`` counts in: the dataset's, or a mixture's sources' one after another
    (loaders/mixture.py shifts each source's file numbers by the files of the sources before it)."""
    if config.sources:
        return tuple(f for source in config.sources for f in source.dataset.files)
    return tuple(config.dataset.files)


def located(config: LoaderConfig, extras: dict, at) -> tf.Tensor:
    """'<file path>: record N' of example ``at``, for a message runtime/translate.py locates."""
    return naming.full_record_names(data_files(config), extras[FILE][at], extras[RECORD][at])
