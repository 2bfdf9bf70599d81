"""Paths of any file system TensorFlow reads (a local path, ``gs://``, ``ram://`` in tests), through
``tf.io.gfile``: the one place the preparation code joins, lists, writes and removes them.
"""
from __future__ import annotations

import os
import shutil
import uuid

from batchloaders.config.datasets import url_scheme
from batchloaders.prepare.files import replace_file


def tf_io():
    """TensorFlow's ``tf.io`` (TensorFlow imported on first use: the package's import does not load it)."""
    import tensorflow as tf  # deferred: reading and writing data needs it, importing the package does not

    return tf.io


def join(base: str, name: str) -> str:
    """``name`` ('/' between directories) under directory ``base``."""
    if url_scheme(base) is not None:
        return base.rstrip("/") + "/" + name
    return os.path.join(base, *name.split("/"))


def relative(path: str, base: str) -> str:
    """``path`` relative to directory ``base``, '/' between directories."""
    if url_scheme(base) is not None:
        return path[len(base.rstrip("/")) + 1:]
    return os.path.relpath(path, base).replace(os.sep, "/")


def exists(path: str) -> bool:
    """Whether a file or directory is there."""
    if url_scheme(path) is None:
        return os.path.lexists(path)
    return tf_io().gfile.exists(path)


def listing(directory: str) -> list[str]:
    """The names in a directory (none when it is not there)."""
    if url_scheme(directory) is None:
        return sorted(os.listdir(directory)) if os.path.isdir(directory) else []
    gfile = tf_io().gfile
    return sorted(name.rstrip("/") for name in gfile.listdir(directory)) if gfile.isdir(directory) else []


def read_bytes(path: str) -> bytes:
    """A whole file's bytes."""
    with tf_io().gfile.GFile(path, "rb") as f:
        return f.read()


def put(path: str, content: bytes | str, prefix: str) -> None:
    """Write ``content`` to ``path`` whole: a temporary file named ``prefix``... beside it, then a rename."""
    if url_scheme(path) is None:
        replace_file(path, content, prefix)
        return
    gfile = tf_io().gfile
    temp = join(path.rsplit("/", 1)[0], f"{prefix}{uuid.uuid4().hex}.tmp")
    with gfile.GFile(temp, "wb") as f:
        f.write(content.encode("utf-8") if isinstance(content, str) else content)
    gfile.rename(temp, path, overwrite=True)


def remove(path: str) -> None:
    """Remove a file (a local symbolic link itself, not what it points to) if it is there."""
    if url_scheme(path) is None:
        if os.path.lexists(path):
            os.unlink(path)
        return
    gfile = tf_io().gfile
    if gfile.exists(path):
        gfile.remove(path)


def remove_entry(path: str) -> None:
    """Remove a file, or a directory and everything under it, if it is there. A local symbolic link is removed
    itself, never followed (here or inside the directory): what it points to stays."""
    if url_scheme(path) is None:
        if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
            os.unlink(path)
        elif os.path.isdir(path):
            shutil.rmtree(path)  # unlinks the links inside, never descends through them
        return
    gfile = tf_io().gfile
    if gfile.isdir(path):
        gfile.rmtree(path)
    elif gfile.exists(path):
        gfile.remove(path)


def remove_tree(path: str) -> None:
    """Remove a directory and everything under it, if it is there (see remove_entry: links are not followed)."""
    if url_scheme(path) is None:
        remove_entry(path)
        return
    gfile = tf_io().gfile
    if gfile.exists(path):
        gfile.rmtree(path)
