"""Measuring one pipeline: output digest, build and first-batch latency, throughput, CPU and memory.

A pipeline is a function building a fresh ``tf.data.Dataset`` of one epoch.

``epoch`` runs one whole epoch on a freshly built dataset and measures it:
building the dataset (ms), creating its iterator and getting the first batch
(ms), then consuming the epoch. The first epoch of a pipeline is its check:
every tensor of every batch is hashed, in order (sha256 over dtype, shape and
bytes), so two pipelines yield identical batches exactly when their digests
are equal, and each batch's examples and frames (``frames_of``) are recorded.
The check epoch also records the multiset of the epoch's examples: one digest
per example (its row of every tensor, and for padded cases only its first
``lengths_of(batch)[i]`` steps of every tensor of rank >= 2, so that the
padding a batch gave it does not count), kept sorted. Two pipelines do the same
work (``same_work``) when these multisets are equal and their batches have the
same sizes, in any order. Later epochs are timed rounds that do nothing per batch but take the time. Steady
throughput is taken after the first ``WARMUP_FRACTION`` of the batches
(tf.data starts its threads and fills its buffers there) up to the end of
the epoch. CPU seconds are ``getrusage`` user + sys of the whole process
from the iterator's creation to the end of the epoch (so every thread
tf.data starts counts). Memory growth is the peak resident set (VmHWM, reset
first through /proc/self/clear_refs) minus the resident set before the
iterator was created; freed memory is returned to the system first
(``malloc_trim``) so that a pipeline does not get a free ride on what the one
before it left behind. Without clear_refs, the resident set is sampled after
every batch instead.
"""
from __future__ import annotations

import ctypes
import dataclasses
import gc
import hashlib
import resource
import time
from typing import Callable

import numpy as np
import tensorflow as tf

WARMUP_FRACTION = 0.1

try:
    _trim = ctypes.CDLL("libc.so.6").malloc_trim
except (OSError, AttributeError):  # not glibc
    _trim = None


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident set
        return True
    except OSError:
        return False


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclasses.dataclass
class Round:
    build_ms: float
    first_ms: float
    examples_per_s: float
    frames_per_s: float | None
    cpu_s: float
    memory_mb: float
    epoch_s: float
    hashed: bool  # measured while hashing (the check epoch)


@dataclasses.dataclass
class Check:
    digest: str  # in order; "" when not hashed
    examples: list  # per batch
    frames: list  # per batch (None when the case has no frames)
    round: Round  # the check epoch, measured while hashing
    example_digests: np.ndarray | None = None  # sorted, one uint64 per example; None when not hashed

    @property
    def multiset(self) -> str | None:
        """One digest of the epoch's examples in any order (and their number)."""
        if self.example_digests is None:
            return None
        return hashlib.sha256(self.example_digests.tobytes()).hexdigest()


def example_digests(arrays: list, lengths) -> np.ndarray:
    """One 64-bit digest per example of a batch (``arrays``: its tensors, flattened, as numpy).

    ``lengths`` (per example, or None for fixed shapes): tensors of rank >= 2 are cut to the
    example's length along axis 1, so that padding does not count."""
    size = len(arrays[0])
    if lengths is None:  # one byte row per example, every tensor's row side by side
        header = "".join(f"{a.dtype.str}{a.shape[1:]}" for a in arrays).encode()
        rows = np.hstack([np.ascontiguousarray(a).reshape(size, -1).view(np.uint8) for a in arrays])
        width, data, base = rows.shape[1], memoryview(rows.tobytes()), hashlib.blake2b(header, digest_size=8)
        out = []
        for i in range(size):
            h = base.copy()
            h.update(data[i * width:(i + 1) * width])
            out.append(h.digest())
        return np.frombuffer(b"".join(out), "<u8")
    out = []
    for i in range(size):
        h = hashlib.blake2b(digest_size=8)
        for a in arrays:
            row = a[i, :int(lengths[i])] if a.ndim >= 2 else a[i]
            h.update(f"{row.dtype.str}{row.shape}".encode())
            h.update(np.ascontiguousarray(row).tobytes())
        out.append(h.digest())
    return np.frombuffer(b"".join(out), "<u8")


def same_work(ours: Check, theirs: Check) -> str | None:
    """None when ``theirs`` yields the same examples as ``ours`` (as a multiset) in as many batches of
    the same sizes (in any order); otherwise what differs."""
    if ours.example_digests is None or theirs.example_digests is None:
        return "not hashed"
    problems = []
    if len(ours.examples) != len(theirs.examples):
        problems.append(f"{len(theirs.examples):,} batches, ours {len(ours.examples):,}")
    elif sorted(ours.examples) != sorted(theirs.examples):
        problems.append("other batch sizes")
    if ours.multiset != theirs.multiset:
        a, b = ours.example_digests, theirs.example_digests
        missing, extra = np.setdiff1d(a, b).size, np.setdiff1d(b, a).size
        problems.append(f"{b.size:,} examples, ours {a.size:,}; {missing:,} of ours' not among theirs, "
                        f"{extra:,} of theirs not among ours'")
    return "; ".join(problems) or None


def epoch(make: Callable[[], tf.data.Dataset], frames_of: Callable | None = None,
          checked: Check | None = None, *, lengths_of: Callable | None = None, hashing: bool = True) -> Check | Round:
    """One epoch on a freshly built dataset, measured.

    Without ``checked``: the check epoch, every batch hashed in order and per example
    (``lengths_of(batch)``: per example lengths of a padded batch, see ``example_digests``);
    ``frames_of(batch)`` (a numpy structure) counts a batch's frames. ``hashing`` false: the
    batches are only counted (batches of serialized records). Returns a Check. With ``checked``
    (that pipeline's Check): a timed round, nothing done per batch but taking the
    time; batch sizes and frames come from the check. Returns a Round.
    """
    gc.collect()
    if _trim is not None:
        _trim(0)
    start = time.perf_counter()
    dataset = make()
    built = time.perf_counter()
    sampled = not _reset_peak()
    rss_before = peak = _status_kb("VmRSS")
    cpu_before = _cpu_seconds()
    opened = time.perf_counter()
    iterator = iter(dataset)
    times, digest, examples, frames, per_example = [], hashlib.sha256(), [], [], []
    for batch in iterator:
        times.append(time.perf_counter())
        if checked is None:
            arrays = [t.numpy() for t in tf.nest.flatten(batch)]
            structure = tf.nest.pack_sequence_as(batch, arrays)
            if hashing:
                for a in arrays:
                    digest.update(f"{a.dtype.str}{a.shape}".encode())
                    digest.update(np.ascontiguousarray(a).tobytes())
                per_example.append(example_digests(arrays, lengths_of(structure) if lengths_of else None))
            examples.append(len(arrays[0]))
            frames.append(frames_of(structure) if frames_of else None)
        if sampled:
            peak = max(peak, _status_kb("VmRSS"))
    cpu = _cpu_seconds() - cpu_before
    if not sampled:
        peak = _status_kb("VmHWM")
    del iterator, dataset
    if checked is not None:
        examples, frames = checked.examples, checked.frames
        if len(times) != len(examples):
            raise AssertionError(f"{len(times)} batches in this epoch, {len(examples)} when checked")
    skip = min(max(1, int(len(times) * WARMUP_FRACTION)), len(times) - 1)  # tiny epochs: all but the first
    span = times[-1] - times[skip - 1] if skip > 0 else float("nan")
    measured = Round(build_ms=(built - start) * 1000, first_ms=(times[0] - opened) * 1000,
                     examples_per_s=sum(examples[skip:]) / span,
                     frames_per_s=None if frames[0] is None else sum(frames[skip:]) / span, cpu_s=cpu,
                     memory_mb=(peak - rss_before) / 1024, epoch_s=times[-1] - opened, hashed=checked is None)
    if checked is not None:
        return measured
    if not hashing:
        return Check("", examples, frames, measured)
    return Check(digest.hexdigest(), examples, frames, measured, np.sort(np.concatenate(per_example)))
