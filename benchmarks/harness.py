"""Measuring one pipeline: output digest, build and first-batch latency, throughput, CPU and memory.

A pipeline is a function building a fresh ``tf.data.Dataset`` of one epoch.

``epoch`` runs one whole epoch on a freshly built dataset and measures it:
building the dataset (ms), creating its iterator and getting the first batch
(ms), then consuming the epoch. The first epoch of a pipeline is its check:
every tensor of every batch is hashed, in order (sha256 over dtype, shape and
bytes), so two pipelines yield identical batches exactly when their digests
are equal, and each batch's examples and frames (``frames_of``) are recorded.
Later epochs are timed rounds that do nothing per batch but take the time. Steady
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
    digest: str
    examples: list  # per batch
    frames: list  # per batch (None when the case has no frames)
    round: Round  # the check epoch, measured while hashing


def epoch(make: Callable[[], tf.data.Dataset], frames_of: Callable | None = None,
          checked: Check | None = None) -> Check | Round:
    """One epoch on a freshly built dataset, measured.

    Without ``checked``: the check epoch, every batch hashed; ``frames_of(batch)``
    (a numpy structure) counts a batch's frames. Returns a Check. With ``checked``
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
    times, digest, examples, frames = [], hashlib.sha256(), [], []
    for batch in iterator:
        times.append(time.perf_counter())
        if checked is None:
            arrays = [t.numpy() for t in tf.nest.flatten(batch)]
            for a in arrays:
                digest.update(f"{a.dtype.str}{a.shape}".encode())
                digest.update(np.ascontiguousarray(a).tobytes())
            examples.append(len(arrays[0]))
            frames.append(frames_of(tf.nest.pack_sequence_as(batch, arrays)) if frames_of else None)
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
    return measured if checked is not None else Check(digest.hexdigest(), examples, frames, measured)
