"""Run each scenario of a global-shuffle program in a child that exits as a program does (the interpreter
finalizes), and print one JSON line per child: its scenario and how it ended.

    python exit_runner.py CONFIG SCENARIO:COUNT [SCENARIO:COUNT ...]

TensorFlow and batchloaders are imported once, before the runtime starts; each child is forked from that
interpreter, so a child pays for building its pipeline, not for the import. A child that has not ended
after TIMEOUT seconds is killed and reported as hung.
"""
from __future__ import annotations

import json
import os
import sys
import time

import tensorflow  # noqa: F401  (imported, not started: children may be forked)

import batchloaders

TIMEOUT = 120.0  # catches a hang only: a child ends in a second or two
KEPT = []  # what a program's module globals hold: alive until the interpreter finalizes


def scenario(name: str, config: str) -> None:
    """One program: build, take one batch, then end as ``name`` says, its iterator still held."""
    if name == "numpy_iterator":
        batches = batchloaders.numpy_iterator(config)
    elif name == "resumable":
        batches = batchloaders.ResumableIterator(batchloaders.build_input_fn(config))
    else:
        batches = iter(batchloaders.build_input_fn(config)())
    KEPT.append(batches)
    KEPT.append(next(batches))
    if name == "raises":
        raise RuntimeError("the program fails after its first batch")


def child(name: str, config: str) -> None:
    """In the forked child: the scenario, then the interpreter's own exit (not os._exit); an uncaught error
    ends it with status 1, its traceback (which holds the iterator too) kept until the interpreter finalizes."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)  # (the raising scenario's traceback)
    scenario(name, config)
    sys.exit(0)


def ended(pid: int) -> str:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return f"exit {os.waitstatus_to_exitcode(status)}"
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "hung"


def main() -> None:
    config, plan = sys.argv[1], sys.argv[2:]
    for item in plan:
        name, count = item.split(":")
        for _ in range(int(count)):
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                child(name, config)
            print(json.dumps({"scenario": name, "end": ended(pid)}), flush=True)


if __name__ == "__main__":
    main()
