"""Python functions that tf.data's threads call, and the interpreter's exit.

The global shuffle's reader is a ``tf.numpy_function`` that tf.data's threads run ahead of the consumer. If
such a call is running, or about to start, when the interpreter finalizes, the thread that asks for the
interpreter lock is ended inside TensorFlow's C++ frames (the process aborts) or never comes back (the
iterator's destructor waits for it for ever, and the program hangs at exit).

So the gate closes at exit, before finalization (an ``atexit`` handler, registered when this module is
imported, that is when ``batchloaders`` is): calls made after that return at once without doing their work,
and the exit waits until no call has run for :data:`QUIET` seconds. By then tf.data's buffers are full of
those quick results and its threads are idle, so nothing asks for the lock while the interpreter finalizes.
Handlers run newest first: one the program registered after importing batchloaders still reads records at
exit; one registered before gets a DataError saying the program is exiting.

The wait is bounded (:data:`LONGEST_WAIT`): a thread of the program that goes on taking batches while the
program exits keeps the calls coming, and the exit goes on after that bound with the calls still running.
"""
from __future__ import annotations

import atexit
import contextlib
import threading
import time

QUIET = 0.05  # seconds without a call after which tf.data's threads are taken to be idle
LONGEST_WAIT = 10.0  # a call still running after this long is left to finish on its own

_lock = threading.Lock()
_gate = {"open": True, "running": 0, "last": 0.0, "registered": False}


def watch() -> None:
    """Close the gate at the interpreter's exit (once per process, whoever calls first)."""
    with _lock:
        if _gate["registered"]:
            return
        _gate["registered"] = True
    atexit.register(close)


@contextlib.contextmanager
def passing():
    """Count one call while it runs. Yields whether it may do its work (False once the interpreter exits)."""
    with _lock:
        _gate["running"] += 1
        allowed = _gate["open"]
    try:
        yield allowed
    finally:
        with _lock:
            _gate["running"] -= 1
            _gate["last"] = time.monotonic()


def is_open() -> bool:
    """Whether calls may do their work (False once the interpreter has begun to exit)."""
    return _gate["open"]


def close(quiet: float = QUIET, longest: float = LONGEST_WAIT) -> None:
    """Close the gate, then wait until no call has run for ``quiet`` seconds (``longest`` at most).

    Args:
        quiet: seconds without a running or finished call that count as idle.
        longest: seconds after which this returns whatever is still running.
    """
    with _lock:
        _gate["open"] = False
    end = time.monotonic() + longest
    while time.monotonic() < end:
        with _lock:
            idle = _gate["running"] == 0 and time.monotonic() - _gate["last"] >= quiet
        if idle:
            return
        time.sleep(quiet / 5)  # (releases the lock tf.data's threads wait for)


watch()  # at import: before any handler a program registers once it has imported batchloaders
