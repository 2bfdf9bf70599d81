"""Upper bounds of every number a config or manifest may hold, and why.

The schemas repeat these numbers as ``maximum`` (so editors flag them) and a
test checks that both say the same. They are chosen from what TensorFlow and
memory accept: a value beyond them used to crash the process (int32 overflow in
thread pools, int64 overflow in shapes, up-front allocations sized by the
batch) rather than raise an error.
"""
from __future__ import annotations

import math

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# Arguments of the loaders (common_args.schema.json and the window arguments).
MAX_BATCH_SIZE = 2**20  # tf.data reserves room for a whole batch before filling it
MAX_THREADS = 1024  # num_parallel_reads, num_parallel_parses: threads of one pipeline
MAX_PREFETCH = 4096  # batches prepared ahead of the model
MAX_READ_BUFFER_BYTES = 2**30  # read buffer of each open file
MAX_OPEN_FILES = 1024  # num_mix_files: tf.data may start a thread per open file (65536 started 4,845)
MAX_SHUFFLE_BUFFER = 2**24  # tf.data sets up every slot of a shuffle buffer first (2**30 crashed)
MAX_COUNT = INT32_MAX  # epochs, interleave buffers, window lengths, strides
MAX_SEED = INT64_MAX  # TensorFlow seeds are int64

# Config and manifest files: refused by size before parsing, and by node count (maps, lists, keys and
# values) while parsing, before the Python objects of the whole document exist.
MAX_CONFIG_BYTES = 2**20  # the largest example config is 2 KB
MAX_CONFIG_NODES = 20_000  # a config with three 1,025-item bucket lists has under 5,000
MAX_MANIFEST_BYTES = 64 * 2**20  # a manifest's files entries take about 150 bytes each
MAX_MANIFEST_NODES = 4_000_000  # 5 per files entry (the entry and its 4 values), with their 4 keys 9
MAX_YAML_NODES = 200_000  # PyYAML's nodes are large (docs/decisions/performance.md): YAML manifests, a JSON error's line map
MAX_DEPTH = 64  # nesting of maps and lists; the deepest real config nests 7 levels
MAX_ALIAS_NODES = 100_000  # nodes that YAML aliases may add to a document

# List files of list datasets: read line by line, refused at the first line past either bound.
MAX_LIST_BYTES = 256 * 2**20
MAX_LIST_ENTRIES = 1_000_000  # data file entries (comments and blank lines not counted)
MAX_LINE_CHARS = 4096  # a longer line means the list file is not a list of paths

# Record accounting (a manifest's files): counts and sizes are int64 in TensorFlow.
MAX_FILE_COUNT = INT64_MAX

# Shapes (manifest features, const features, padding).
MAX_DIM = INT32_MAX  # one axis
MAX_RANK = 32  # axes of one tensor (TensorFlow allows 254; no real feature comes near): the schemas' shape maxItems
MAX_RECORD_ELEMENTS = INT32_MAX  # elements of one feature in one record
MAX_RECORD_BYTES = INT32_MAX  # a protobuf (one record) holds at most 2 GiB

# What a built pipeline may hold at once, estimated from the manifest's shapes before any
# data is read (variable axes count as 1 step, window axes as max_window).
MAX_BATCH_BYTES = 4 * 2**30  # one batch of the model's tensors
MAX_HELD_BYTES = 16 * 2**30  # the shuffle buffer; the read buffers of all open files

ITEM_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "int16": 2, "int32": 4,
              "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1,
              "string": 1}  # a string counts as at least one byte


def elements(shape) -> int:
    """Elements of a shape whose unknown (None) axes count as 1."""
    return math.prod(1 if d is None else d for d in shape)


def gib(n: int) -> str:
    """Bytes as GiB for messages: 4294967296 -> '4 GiB', 6442450944 -> '6 GiB'."""
    value = n / 2**30
    return f"{value:,.0f} GiB" if value >= 10 else f"{value:.3g} GiB"
