"""A Python interpreter with TensorFlow, Keras and batchloaders already imported, forking a child per program.

tests/warm.py starts it and talks to it: one JSON request a line on stdin ({"code", "argv", "cwd", "env",
"out", "err"}); for each it forks, answers {"pid": N} at once and {"returncode": N} when the child ends.
The child runs ``code`` as ``python -c`` would (``__main__``, ``sys.argv``, ``''`` first on ``sys.path``) in
``cwd`` with exactly ``env``, its stdout and stderr going to the files ``out`` and ``err``.

Importing TensorFlow starts no thread and makes no eager context (checked below), so each child begins as a
fresh interpreter that has done its imports: TensorFlow's context, devices and thread pools are its own.
What a fork cannot give is an import that reads the environment: programs that set the environment before
importing run in a fresh interpreter instead (tests/warm.py: ``needs_fresh``).
"""
from __future__ import annotations

import gc
import json
import os
import sys
import traceback

import numpy  # noqa: F401  (its OpenBLAS starts threads of its own, which handle a fork)

THREADS = len(os.listdir("/proc/self/task"))

import keras  # noqa: E402,F401  (imported for the children)
import tensorflow  # noqa: E402,F401
from tensorflow.python.eager import context  # noqa: E402

import batchloaders  # noqa: E402,F401
import batchloaders.cli.main  # noqa: E402,F401
import batchloaders.input_fn  # noqa: E402,F401


def run_child(request: dict) -> int:
    """In the forked child: run the request's code; its exit status."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    devnull = os.open(os.devnull, os.O_RDONLY)  # stdin is the server's request channel
    os.dup2(devnull, 0)
    os.close(devnull)
    for fd, path in ((1, request["out"]), (2, request["err"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = ["-c", *request["argv"]]
    sys.path[0] = ""
    code = 0
    try:
        exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as done:
        if isinstance(done.code, int):
            code = done.code
        elif done.code is not None:
            print(done.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def main() -> None:
    if context.context()._context_handle is not None or len(os.listdir("/proc/self/task")) != THREADS:
        sys.exit("warm_server: importing started TensorFlow's runtime; children would share it")
    gc.collect()
    gc.freeze()  # the imports' objects: never walked again by a child's collections (nor copied by them)
    replies = os.fdopen(os.dup(1), "w")  # the replies' own channel: whatever else writes to stdout goes to stderr
    os.dup2(2, 1)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os._exit(run_child(request))
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
