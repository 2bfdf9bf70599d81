"""The limit: what reading (and parsing) the data costs on this machine, with nothing else.

* ``read_parse(parse)``: all files in turn (one ``TFRecordDataset`` over the list, no interleave),
  ``batch(1024)``, one vectorized parse per batch (the case's ``hw.parse_*``), nothing else: no
  parallel calls, no prefetch, no windows, no padding beyond what the parse of 1024 records does.
* ``read_only()``: the same reading, records batched and counted, not parsed.

Both are single pipelines of one thread each; a loader that overlaps reading with parsing on
several cores can run faster than them. For sequence data the rates compare in frames/s (run.py):
the read-only limit counts records, so run.py converts it at the data's frames per record.
Every function returns ``make(files, batch_size)``; the batch size is ``BATCH``, whatever the case's.
"""
from __future__ import annotations

import tensorflow as tf

BATCH = 1024  # records per parse
BUFFER = 1 << 20  # read buffer, bytes


def _records(files) -> tf.data.Dataset:
    return tf.data.TFRecordDataset(files, buffer_size=BUFFER).batch(BATCH)


def read_parse(parse):
    def make(files, batch_size):
        return _records(files).map(parse)
    return make


def read_only():
    def make(files, batch_size):
        return _records(files)
    return make
