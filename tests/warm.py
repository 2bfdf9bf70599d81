"""Run a program as ``python -c`` would, without paying TensorFlow's import (4-5 s) every time.

``WarmPython.run`` hands the program to tests/warm_server.py, which has imported TensorFlow, Keras and
batchloaders once and forks a child per program. A program that sets the environment before it imports
(``os.environ``, ``putenv``) could see an import made without its setting: it runs in a fresh interpreter.
"""
from __future__ import annotations

import atexit
import json
import os
import pathlib
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile

SERVER = pathlib.Path(__file__).with_name("warm_server.py")
FRESH = re.compile(r"\bos\.environ\b|\bputenv\b|\bmultiprocessing\b")
CLI = "import runpy\nrunpy.run_module('batchloaders', run_name='__main__', alter_sys=True)\n"  # python -m batchloaders


def needs_fresh(code: str) -> bool:
    return bool(FRESH.search(code))


class WarmPython:
    def __init__(self, env: dict):
        clean = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        self._server = subprocess.Popen([sys.executable, str(SERVER)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, bufsize=0, env=clean, cwd=SERVER.parent)
        self._pending = b""  # replies read but not yet taken (unbuffered: select sees what is left)
        self._scratch = tempfile.mkdtemp(prefix="warm-")

    def run(self, code: str, *, argv=(), cwd, env: dict, timeout: float) -> subprocess.CompletedProcess:
        """What ``subprocess.run([sys.executable, "-c", code, *argv], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=timeout)`` returns, its stdout and stderr included."""
        if needs_fresh(code) or self._server.poll() is not None:
            return self._fresh(code, argv, cwd, env, timeout)
        out, err = os.path.join(self._scratch, "out"), os.path.join(self._scratch, "err")
        request = {"code": code, "argv": list(argv), "cwd": str(cwd), "env": dict(env), "out": out, "err": err}
        try:
            self._server.stdin.write((json.dumps(request) + "\n").encode())
            pid = self._reply(120)["pid"]
        except (BrokenPipeError, RuntimeError):  # the server refused to start (its reason is on stderr)
            return self._fresh(code, argv, cwd, env, timeout)
        try:
            code_ = self._reply(timeout)["returncode"]
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)
            self._reply(30)
            raise
        with open(out) as o, open(err) as e:
            return subprocess.CompletedProcess([sys.executable, "-c", code, *argv], code_, o.read(), e.read())

    @staticmethod
    def _fresh(code, argv, cwd, env, timeout) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code, *argv], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout)

    def _reply(self, timeout: float) -> dict:
        while b"\n" not in self._pending:
            ready, _, _ = select.select([self._server.stdout], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(str(SERVER), timeout)
            chunk = os.read(self._server.stdout.fileno(), 65536)
            if not chunk:
                raise RuntimeError(f"{SERVER.name} ended (exit {self._server.wait()})")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        self._server.stdin.close()
        self._server.wait(timeout=60)
        shutil.rmtree(self._scratch, ignore_errors=True)


_shared: WarmPython | None = None


def shared() -> WarmPython:
    """This process's server, started at the first use and closed when the process ends."""
    global _shared
    if _shared is None:
        _shared = WarmPython(dict(os.environ))
        atexit.register(_shared.close)
    return _shared
