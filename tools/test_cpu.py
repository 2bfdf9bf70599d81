"""Sum the per-file CPU seconds that ``BATCHLOADERS_TEST_CPU=<dir> make test`` wrote (tests/cpu_cost.py).

    python tools/test_cpu.py <dir> [<dir before>]   # one column, or before / after / change
    python tools/test_cpu.py --tests <dir> [N]      # the N costliest tests
"""
from __future__ import annotations

import json
import pathlib
import sys


def load(directory: str) -> dict[str, float]:
    """{test file: CPU seconds}, summed over the pytest processes that wrote into ``directory``."""
    out: dict[str, float] = {}
    for path in pathlib.Path(directory).glob("cpu-*.json"):
        for name, seconds in json.loads(path.read_text())["files"].items():
            out[name] = out.get(name, 0.0) + seconds
    return out


def tests(directory: str, top: int = 40) -> None:
    """The ``top`` costliest single tests (CPU seconds, setup and teardown included)."""
    out: dict[str, float] = {}
    for path in pathlib.Path(directory).glob("cpu-*.json"):
        out.update(json.loads(path.read_text()).get("tests", {}))
    for name, seconds in sorted(out.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{seconds:8.1f}  {name}")


def main(argv: list[str]) -> None:
    if argv[0] == "--tests":
        return tests(argv[1], int(argv[2]) if len(argv) > 2 else 40)
    after = load(argv[0])
    before = load(argv[1]) if len(argv) > 1 else {}
    for name in sorted(set(after) | set(before), key=lambda n: -max(after.get(n, 0), before.get(n, 0))):
        if before:
            print(f"{before.get(name, 0):8.1f} {after.get(name, 0):8.1f} {after.get(name, 0) - before.get(name, 0):+8.1f}  {name}")
        else:
            print(f"{after[name]:8.1f}  {name}")
    if before:
        print(f"{sum(before.values()):8.1f} {sum(after.values()):8.1f}  total")
    else:
        print(f"{sum(after.values()):8.1f}  total")


if __name__ == "__main__":
    main(sys.argv[1:])
