"""CPU seconds per test file, its processes included: ``BATCHLOADERS_TEST_CPU=<dir> pytest ...`` writes one
JSON per pytest process into <dir>; ``python tools/test_cpu.py <dir>`` sums them. CPU time, unlike wall time,
does not grow when other jobs share the cores, so two runs compare on a busy machine."""
from __future__ import annotations

import json
import os
import resource
import time

_TICK = os.sysconf("SC_CLK_TCK")


def _descendants_cpu(root: int) -> float:
    """CPU of the live processes under ``root``, each with the children it has reaped (/proc stat fields
    utime, stime, cutime, cstime): a server this process started, and the programs it forked."""
    parent, cpu = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(name)] = int(fields[1])
        cpu[int(name)] = sum(int(v) for v in fields[11:15]) / _TICK
    total = 0.0
    for pid in cpu:
        p = parent[pid]
        while p > 1 and p != root:
            p = parent.get(p, 0)
        if p == root and pid != root:
            total += cpu[pid]
    return total


def total_cpu(children: bool = True) -> float:
    """This process's CPU plus, with ``children``, its children's, reaped or running."""
    if not children:
        return time.process_time()
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + reaped.ru_utime + reaped.ru_stime + _descendants_cpu(os.getpid())


class CpuCost:
    """``children`` False in pytest-xdist's controller, whose children are the workers that count their own."""

    def __init__(self, directory: str, children: bool = True):
        self.directory = directory
        self.children = children
        self.files: dict[str, float] = {}
        self.tests: dict[str, float] = {}
        self.start = 0.0

    def add(self, name: str, test: str = "") -> None:
        now = total_cpu(self.children)
        self.files[name] = self.files.get(name, 0.0) + now - self.start
        if test:
            self.tests[test] = now - self.start
        self.start = now

    def write(self) -> None:
        self.add("(after the last test)" if self.children else "(xdist controller)")
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, f"cpu-{os.getpid()}.json")
        with open(path, "w") as f:
            json.dump({"files": self.files, "tests": self.tests, "total": self.start}, f)
