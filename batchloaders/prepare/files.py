"""Writing what the data commands write: a file replaced whole (a temporary file, then a rename), the
temporary files of a killed run removed, a manifest's JSON laid out as the commands lay it out.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import time

from batchloaders.errors import Problem

try:
    import fcntl
except ImportError:  # Windows: leftovers are told by their age alone
    fcntl = None

TEMP_PREFIX, TEMP_SUFFIX = ".__manifest__.", ".tmp"
TEMP_NAME = re.compile(re.escape(TEMP_PREFIX) + r"[A-Za-z0-9_]+" + re.escape(TEMP_SUFFIX))  # mkstemp's names
UNLOCKED_AGE = 3600  # seconds after which a temporary manifest counts as left over where files cannot be locked


def to_json(value, level: int = 0) -> str:
    """JSON indented by 2, with arrays of numbers and strings (shapes) kept on one line."""
    inner, outer = "  " * (level + 1), "  " * level
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(key, ensure_ascii=False)}: {to_json(item, level + 1)}"
                 for key, item in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + outer + "}"
    if isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value):
        return "[\n" + ",\n".join(inner + to_json(item, level + 1) for item in value) + "\n" + outer + "]"
    return json.dumps(value, ensure_ascii=False)


def remove_leftovers(directory: str, started: float, names: re.Pattern = TEMP_NAME) -> list[str]:
    """Remove the temporary manifests (files ``names`` matches) in ``directory`` that killed runs left behind;
    return their names.

    Only our own names, only files last written before this run ``started``, and only those no process
    holds the lock of: a write in progress locks its file until it ends, and the lock ends with its
    process however it dies. Without locks (Windows), only files older than UNLOCKED_AGE.
    """
    removed = []
    with os.scandir(directory) as entries:
        found = sorted(e.name for e in entries if names.fullmatch(e.name) and e.is_file(follow_symlinks=False))
    for name in found:
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue  # renamed by its run since the listing, or not ours to open
        try:
            if os.fstat(fd).st_mtime < started and _unlocked(fd):
                os.unlink(path)
                removed.append(name)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def _unlocked(fd: int) -> bool:
    """Whether no process holds the lock of this open file (it is then ours until ``fd`` is closed)."""
    if fcntl is None:
        return time.time() - os.fstat(fd).st_mtime > UNLOCKED_AGE
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _locked_temp(directory: str, prefix: str = TEMP_PREFIX) -> tuple[int, str]:
    """A new temporary file in ``directory``, open and locked for this process while it writes."""
    while True:
        fd, temp = tempfile.mkstemp(prefix=prefix, suffix=TEMP_SUFFIX, dir=directory)
        if fcntl is None:
            return fd, temp
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # a file system without locks (some network mounts): leftovers go by age there
            return fd, temp
        if os.fstat(fd).st_nlink:
            return fd, temp
        os.close(fd)  # another run took it for a leftover between mkstemp and the lock: make another


def replace_file(path: str, content: str | bytes, prefix: str = TEMP_PREFIX) -> None:
    """Write ``content`` to ``path`` atomically: a temporary file (named ``prefix``...) in the same directory,
    then a rename."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, temp = _locked_temp(directory, prefix)
    # The lock belongs to the open file, not to one descriptor: a copy keeps it until the rename is done.
    held = os.dup(fd) if fcntl is not None else None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content.encode("utf-8") if isinstance(content, str) else content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, _mode(path))
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
    finally:
        if held is not None:
            os.close(held)


def _mode(path: str) -> int:
    """The permissions of the manifest being replaced, or those a new file gets under the umask."""
    try:
        return os.stat(path).st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


_RECORD_FIRST = re.compile(r"record (\d+)(?::\s*|\s+)(.*)", re.S)


def located(file: str, text: str) -> Problem:
    """A data file's problem as a located Problem: 'record N' where the text begins with the record it is in,
    else the whole 'file'."""
    found = _RECORD_FIRST.fullmatch(text)
    if found:
        return Problem(file, f"record {found.group(1)}", found.group(2))
    return Problem(file, "file", text)
