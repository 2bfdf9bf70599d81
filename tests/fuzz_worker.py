"""Child process for tests/test_fuzz.py: validate (and build) one config or manifest per stdin line.

Run as ``python tests/fuzz_worker.py``. It imports batchloaders and TensorFlow
once, prints ``{"ready": true}`` and then answers every case, one JSON line in,
one JSON line out::

    in:  {"kind": "config" | "manifest", "text": "..." (or "data": base64 bytes),
          "suffix": ".yaml" | ".json", "build": bool, "dir": "...",
          "config": "path of a valid config using the dataset in dir" (manifest cases only)}
    out: {"outcome": "ok" | "batchloader_error" | "data_error" | "foreign", "type": "...",
          "message": "first 300 characters", "seconds": 0.01, "stage": "...", "where": "...", ...}

config cases write the text to ``dir/case<suffix>`` (dir sits next to the data,
so relative dataset paths resolve) and run ``load_config``; manifest cases write
it to ``dir/__manifest__.json`` (dir is a copy of a small dataset), run
``load_manifest``, then validate the fixed config that reads that dataset. When
``build`` is true and validation succeeded, ``build_input_fn(path)()`` is built
and ONE batch fetched.

Outcomes:
  ok                 validated (and, if asked, built and fetched a batch; "empty": true when the
                     dataset is finite and ends before its first batch)
  batchloader_error  a BatchLoaderError whose message names the file it is about
  data_error         a tf.errors.OpError while fetching the batch that the config or
                     manifest caused: the message names the config/manifest (the
                     package's own run-time checks do), is one of the package's known
                     run-time checks, or (manifest cases) says the records do not
                     match the manifest. Accepted, but every one is a finding: a
                     value that passed validation and failed in TensorFlow.
  foreign            anything else: another exception type, a BatchLoaderError that
                     does not name the file, an unattributable OpError.

Nothing but the reply lines goes to stdout: file descriptor 1 is pointed at
stderr at start-up, and replies go to a private duplicate of the original.
"""
from __future__ import annotations

import base64
import gc
import json
import os
import re
import sys
import time
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Replies go to a private copy of stdout; anything else written to fd 1 (print, C++ logs) lands on stderr.
_REPLY = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr

import batchloaders  # noqa: E402
import tensorflow as tf  # noqa: E402
from batchloaders.errors import BatchLoaderError  # noqa: E402
from batchloaders.config.config import load_config  # noqa: E402
from batchloaders.config.manifest import load_manifest  # noqa: E402

PACKAGE_DIR = os.path.dirname(os.path.abspath(batchloaders.__file__))

# The package's own data-dependent run-time checks (tf.debugging asserts), which a config
# can trip only through the data it reads: they are data errors, by design.
_OWN_RUNTIME_CHECKS = (
    "is out of range for an example",  # steps/slice.py, index past a variable-length axis
    "is longer than the padding shape",  # batching.py
    "a full pass over the",  # loaders/windows.py, no window fits
    "differ in length",  # loaders/continuous_sequence.py (raw and translated)
)
# What TensorFlow says when records do not match the manifest that describes them.
_PARSE_MISMATCH = re.compile(
    r"Can't parse serialized|Could not parse example input|is required but could not be found|"
    r"has an unexpected number of values|"
    # A raw feature whose manifest shape disagrees with its byte strings: TensorFlow's graph
    # optimizer drops the reshape that should fail, so only the iterator's final check notices.
    r"Incompatible shapes at component|"
    r"Key: .*Number of (float|int64|bytes) values|Data types don't match|Name: .*Key:|"
    r"Inconsistent max number of elements for feature|"
    r"Input to reshape is a tensor with|DecodeRaw|Input to DecodeRaw|corrupted record|Data loss|"
    r"not a multiple of|Unable to parse|is not a valid|must be a multiple of|Expected .* bytes", re.S)


def _frame(tb_entries, inside_package: bool) -> str:
    for entry in reversed(tb_entries):
        path = os.path.abspath(entry.filename)
        if not inside_package or path.startswith(PACKAGE_DIR + os.sep):
            rel = os.path.relpath(path, os.path.dirname(PACKAGE_DIR)) if inside_package else path
            return f"{rel}:{entry.lineno} {entry.name}"
    return ""


def _describe(error: BaseException) -> dict:
    entries = traceback.extract_tb(error.__traceback__)
    return {"type": type(error).__name__, "message": str(error)[:300],
            "where": _frame(entries, False), "package_where": _frame(entries, True)}


def _tf_cause(error: tf.errors.OpError) -> str:
    """The part of a TensorFlow error that says what went wrong, without the function and iterator names."""
    text = error.message
    text = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", text)
    text = re.sub(r"^Error in user-defined function passed to \S+ transformation with iterator: [\w:\[\]]+: ", "",
                  text)
    return text.split("\n\t [[")[0].strip()


def _names_file(error: BatchLoaderError, files) -> bool:
    text = str(error)
    return any(f and f in text for f in files)


def _data_error(error: tf.errors.OpError, case: dict, files) -> str | None:
    """Why a fetch-time OpError is the data's or the config's doing, or None."""
    text = str(error)
    if any(f and f in text for f in files):
        return "names the file"
    for check in _OWN_RUNTIME_CHECKS:
        if check in text:
            return f"package run-time check: {check}"
    if case["kind"] == "manifest" and _PARSE_MISMATCH.search(text):
        return "records do not match the mutated manifest"
    return None


def run(case: dict) -> dict:
    kind, directory = case["kind"], case["dir"]
    data = base64.b64decode(case["data"]) if "data" in case else case["text"].encode("utf-8")
    if kind == "config":
        path = os.path.join(directory, "case" + case.get("suffix", ".yaml"))
        config_path = path
    else:
        path = os.path.join(directory, "__manifest__.json")
        config_path = case["config"]
    with open(path, "wb") as f:
        f.write(data)
    files = [path] if kind == "config" else [path, config_path]
    stage = "validate"
    times = {}
    start = time.perf_counter()
    try:
        if kind == "manifest":
            stage = "manifest"
            load_manifest(path)
            times["manifest"] = time.perf_counter() - start
            stage = "validate"
        load_config(config_path)
        times["validate"] = time.perf_counter() - start
        if case.get("build"):
            stage = "build"
            input_fn = batchloaders.build_input_fn(config_path)
            ds = input_fn()
            times["build"] = time.perf_counter() - start
            stage = "fetch"
            iterator = iter(ds)
            try:
                batch = next(iterator)
                tf.nest.map_structure(lambda t: t.numpy(), batch)
            except StopIteration:  # a finite dataset with no batch (e.g. fewer windows than a batch)
                empty = True
            else:
                empty = False
            finally:  # stop the prefetch threads of an endless dataset before the next case
                del iterator, ds, input_fn
                gc.collect()
            times["fetch"] = time.perf_counter() - start
            if empty:
                return {"outcome": "ok", "empty": True, "stage": stage, "seconds": time.perf_counter() - start,
                        "times": times}
        return {"outcome": "ok", "stage": stage, "seconds": time.perf_counter() - start, "times": times}
    except BatchLoaderError as error:
        reply = {"outcome": "batchloader_error", "stage": stage, **_describe(error)}
        # The stage's own file: the manifest for load_manifest, else the config (which may
        # rightly blame the manifest it reads, in manifest cases).
        wanted = [path] if stage == "manifest" else files
        if not _names_file(error, wanted):
            reply["outcome"] = "foreign"
            reply["why"] = f"BatchLoaderError does not name the file {wanted[0]}"
        reply["seconds"] = time.perf_counter() - start
        reply["times"] = times
        return reply
    except tf.errors.OpError as error:
        reply = {"outcome": "foreign", "stage": stage, **_describe(error), "message": _tf_cause(error)[:300],
                 "tf_message": str(error)[:1500]}
        why = _data_error(error, case, files) if stage == "fetch" else None
        if why:
            reply["outcome"] = "data_error"
            reply["why"] = why
        reply["seconds"] = time.perf_counter() - start
        reply["times"] = times
        return reply
    except BaseException as error:  # noqa: BLE001  (everything else is the finding)
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        reply = {"outcome": "foreign", "stage": stage, **_describe(error),
                 "traceback": "".join(traceback.format_exception(error))[-3000:]}
        reply["seconds"] = time.perf_counter() - start
        reply["times"] = times
        return reply


def main() -> None:
    _REPLY.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        reply = run(json.loads(line))
        _REPLY.write(json.dumps(reply, default=str) + "\n")


if __name__ == "__main__":
    main()
