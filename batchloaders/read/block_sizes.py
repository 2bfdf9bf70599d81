"""How many records each loader reads (and parses) at once per file: its block size.

No TensorFlow here, so that ``describe`` can say what the loaders will do without importing it;
sources.py and the loaders take their block sizes from this module.
"""
from __future__ import annotations

from batchloaders.config.datasets import url_scheme
from batchloaders.config.kinds import kind
from batchloaders.core.limits import ITEM_BYTES, elements
from batchloaders.core.model import LoaderConfig

# independent: blocks are walked by the end-of-file check (integrity.py) one at a time; each block
# has a fixed cost (docs/decisions/performance.md), so blocks hold up to 1024 records, fewer when
# records are large (a block of every open file is held in memory).
MAX_RECORDS_PER_BLOCK = 1024
MIN_RECORDS_PER_BLOCK = 16
BLOCK_BYTES = 8 * 2**20

# continuous_sequence: block sizes trade memory for per-block overhead (one parse call and one scan
# step per block). A block should hold a few windows so that most windows are cut without the
# carried tail growing; records of unknown length are read 64 at a time.
CONTINUOUS_RECORDS_PER_BLOCK = 64
MIN_BLOCK_STEPS = 16384
MAX_CONTINUOUS_RECORDS_PER_BLOCK = 4096

# discrete_sequence: blocks hold serialized records only, so they can be large: each block costs a
# fixed amount (end-of-file and window scan steps, a planning call), so windows/s grew with the
# block up to 1024 records (docs/decisions/performance.md). Large records get fewer per block:
# a block is parsed at once, padded to its longest record.
SERIALIZED_RECORDS_PER_BLOCK = 1024
MIN_SERIALIZED_RECORDS_PER_BLOCK = 64


def sampled_record_bytes(config: LoaderConfig, files: int = 8) -> int | None:
    """The largest first record of up to ``files`` local uncompressed data files (one 8-byte read each),
    or None when none can be read that way. Feature lists make the manifest's estimate useless."""
    if config.dataset.manifest.compression is not None:
        return None
    sizes = []
    for path in config.dataset.files[:files]:
        if url_scheme(path) is not None:
            continue
        try:
            with open(path, "rb") as f:
                head = f.read(8)
        except OSError:
            continue
        if len(head) == 8:
            sizes.append(int.from_bytes(head, "little"))
    # A damaged header can claim anything: the reader reports it; here it only must not blow up a block.
    return min(max(sizes), BLOCK_BYTES) if sizes else None


def _record_bytes(config: LoaderConfig) -> tuple[int, bool]:
    """A record's size (the manifest's estimate, for SequenceExamples at least the largest sampled first
    record), and whether it is known: a feature list counts as one step when no record could be sampled."""
    record = sum(elements(f.record_shape) * ITEM_BYTES[f.dtype] for f in config.dataset.manifest.features.values())
    manifest = config.dataset.manifest
    if not manifest.allow_var_len and not any(f.var_len for f in manifest.features.values()):
        return max(record, 1), True
    sampled = sampled_record_bytes(config)
    return max(record, sampled or 0, 1), sampled is not None


def independent(config: LoaderConfig) -> int:
    """Records per block for the independent loader, from the manifest's estimate of a record's size."""
    return max(MIN_RECORDS_PER_BLOCK, min(MAX_RECORDS_PER_BLOCK, BLOCK_BYTES // _record_bytes(config)[0]))


# bucketing and packing regroup the (transformed) examples of one block at a time, and each block
# has a fixed cost: packing places a block in one loop step per distinct length, bucketing's scan
# merges the examples waiting in its buckets with every block; so larger blocks give both more
# examples/s (docs/decisions/regroup-blocks.md). A block holds the largest sampled record
# at most 128 MiB, and never fewer than 1,024 examples. Blocks stay at 1,024 where their size in
# memory cannot be told from the records: the sequence loaders' examples are windows of several
# records, records that cannot be sampled (compressed or remote files) may hold long feature lists,
# and processing steps or secondary features of more than a scalar per example can make an example
# much larger than its record.
MAX_REGROUP_EXAMPLES = 4096
MIN_REGROUP_EXAMPLES = 1024
REGROUP_BLOCK_BYTES = 128 * 2**20


def regroup(config: LoaderConfig, batch_size: int) -> int:
    """Examples per block for bucketing and packing: at least one batch of ``batch_size``."""
    if (kind(config.type).sequence or config.processing_steps
            or any(f.info is None or f.info.shape for f in config.secondary_features)):
        return max(batch_size, MIN_REGROUP_EXAMPLES)
    record, known = _record_bytes(config)
    if not known:
        return max(batch_size, MIN_REGROUP_EXAMPLES)
    return max(batch_size, MIN_REGROUP_EXAMPLES, min(MAX_REGROUP_EXAMPLES, REGROUP_BLOCK_BYTES // record))


def continuous(config: LoaderConfig, selected: dict) -> int:
    """Records per block for continuous_sequence: enough steps for a few windows."""
    steps = next(iter(selected.values())).steps_per_record
    if steps is None:
        return CONTINUOUS_RECORDS_PER_BLOCK
    wanted = max(2 * config.window.max_window, MIN_BLOCK_STEPS)
    return max(1, min(MAX_CONTINUOUS_RECORDS_PER_BLOCK, -(-wanted // steps)))


def discrete(config: LoaderConfig) -> int:
    """Serialized records per block for discrete_sequence, fewer when records are large."""
    per_block = SERIALIZED_RECORDS_PER_BLOCK
    record = sampled_record_bytes(config)
    if record:
        per_block = min(per_block, max(MIN_SERIALIZED_RECORDS_PER_BLOCK, BLOCK_BYTES // record))
    return max(per_block, 2 * config.window.max_window)


# The most record slots every planned discrete_sequence window gets (loaders/discrete_sequence.py): an empty
# slot costs 32 bytes, and a block may plan as many windows as it has records.
DISCRETE_SLOTS = 128


def discrete_slots_fixed(config: LoaderConfig) -> bool:
    """Whether every planned discrete_sequence window gets max_window record slots, so that all have one shape
    and unshuffled ones are cut into batches by ``rebatch``; else as many as its block's widest window."""
    return config.window.max_window <= DISCRETE_SLOTS or config.window.fixed


def sequence_records_per_block(config: LoaderConfig) -> int | None:
    """What a sequence loader reads at once per file; None for the independent loader."""
    loader = kind(config.type)
    if not loader.sequence:
        return None
    return continuous(config, config.selected) if loader.concatenates_records else discrete(config)


# mixing.batches stratified: the sources' pieces are joined a group of batches at a time (one function call,
# one copy per group, loaders/stratified.py); a call per batch cost about 20% of the steady rate on small
# examples (docs/decisions/performance.md). A group holds about GROUP_BYTES and at most GROUP_BATCHES
# batches: each batch of a group is a slice per source in the group's graph.
GROUP_BYTES = 8 * 2**20
GROUP_BATCHES = 32


def record_bytes(config: LoaderConfig) -> int:
    """A record's size as the block sizes here estimate it (the manifest's, else the largest sampled)."""
    return _record_bytes(config)[0]


def stratified_group(period: int, batch_bytes: int) -> int:
    """Batches joined at once by stratified mixing: whole periods of the schedule when one fits.

    Args:
        period: batches in one period of the schedule (config/strata.py).
        batch_bytes: the estimated size of one batch in memory.

    Returns:
        At least 1; at most GROUP_BATCHES and about GROUP_BYTES of batches where one batch is smaller; a
        multiple of ``period`` when that is at most as many (so that every group takes the same counts).
    """
    most = max(1, min(GROUP_BATCHES, GROUP_BYTES // max(batch_bytes, 1)))
    return period * (most // period) if period <= most else most
