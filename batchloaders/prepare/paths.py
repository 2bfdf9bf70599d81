"""Paths of any file system TensorFlow reads (a local path, ``gs://``, ``ram://`` in tests): the one place
``manifest``, ``index``, ``verify`` and ``reshard`` join, list, read, write and remove them.

A local path goes through ``os`` exactly as the one-machine commands always have (symlinks followed within
the dataset, files locked while written, leftovers told by their lock); a URL goes through ``tf.io.gfile``.
A file is written whole under a temporary name beside it, then renamed over its final name: atomic on a
local file system; on an object store (``gs://``, ``s3://``) a rename is a copy then a delete, so the final
object appears whole or not at all, but a run killed between the two may leave the temporary object, which
the next run removes once it is older than ``files.UNLOCKED_AGE`` (objects cannot be locked).
"""
from __future__ import annotations

import os
import re
import shutil
import uuid
from typing import Callable

from batchloaders.errors import ManifestError, Problem
from batchloaders.config.datasets import _walk, url_scheme
from batchloaders.config.document import MANIFEST, Document, load_file, parse_text
from batchloaders.config.manifest import is_sidecar, manifest_from_document
from batchloaders.core.model import Manifest, file_key
from batchloaders.prepare import files
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


def absolute(path: str) -> str:
    """``path`` absolute (what a worker whose working directory differs still finds); a URL as it is."""
    return path if url_scheme(path) is not None else os.path.abspath(path)


def key(path: str) -> str:
    """How a manifest keys the file ``path`` (:func:`batchloaders.core.model.file_key`)."""
    return file_key(path)


def dirname(path: str) -> str:
    """The directory ``path`` lies in (absolute for a local path)."""
    if url_scheme(path) is not None:
        return path.rstrip("/").rsplit("/", 1)[0]
    return os.path.dirname(os.path.abspath(path))


def within(path: str, directory: str) -> bool:
    """Whether ``path`` lies below ``directory`` by its name (symlinks not resolved)."""
    if (url_scheme(path) is None) != (url_scheme(directory) is None):
        return False
    if url_scheme(directory) is not None:
        return file_key(path).startswith(file_key(directory).rstrip("/") + "/")
    return os.path.relpath(os.path.abspath(path), os.path.abspath(directory)).split(os.sep)[0] != os.pardir


def isdir(path: str) -> bool:
    """Whether ``path`` is a directory."""
    if url_scheme(path) is None:
        return os.path.isdir(path)
    return tf_io().gfile.isdir(path)


def found(path: str) -> bool:
    """Whether a file is there (a local symlink counts when what it leads to is there)."""
    if url_scheme(path) is None:
        return os.path.exists(path)
    return tf_io().gfile.exists(path)


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


def walk(directory: str, match: Callable[[str], bool]) -> tuple[list[str], list[str]]:
    """The data files under ``directory`` whose path relative to it ('/' between directories) ``match`` accepts,
    in the order a ``dir`` dataset reads them (sorted by their relative path's components), record indexes and
    their temporary files left out; and the paths that cannot be read, described.

    A local directory is walked as a ``dir`` dataset walks it (symlinks within it followed, each real file
    once); a URL's by listing it.
    """
    if url_scheme(directory) is None:
        return _walk(directory, os.stat(directory), match)
    gfile = tf_io().gfile
    out: list[str] = []
    stack = [iter(sorted(name.rstrip("/") for name in gfile.listdir(directory)))]
    below: list[str] = []  # the relative directory each listing on the stack is of
    while stack:
        name = next(stack[-1], None)
        if name is None:
            stack.pop()
            below = below[:-1]
            continue
        relative = "/".join([*below, name])
        path = join(directory, relative)
        if gfile.isdir(path):
            stack.append(iter(sorted(entry.rstrip("/") for entry in gfile.listdir(path))))
            below = [*below, name]
        elif match(relative) and not is_sidecar(name):
            out.append(path)
    return out, []


def load_document(path: str) -> Document:
    """A manifest file's document, on any file system (ManifestError as ``load_file`` raises it)."""
    if url_scheme(path) is None:
        return load_file(path, ManifestError, MANIFEST)
    gfile = tf_io().gfile
    if not gfile.exists(path):
        raise ManifestError(Problem(path, "$", "file not found"))
    size = gfile.stat(path).length
    if size > MANIFEST.max_bytes:
        raise ManifestError(Problem(path, "$", f"found a file of {size:,} bytes: expected a {MANIFEST.kind} of at "
                                               f"most {MANIFEST.max_bytes // 2**20} MiB (is this a data file?)"))
    try:
        text = read_bytes(path).decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ManifestError(Problem(path, "$", f"found bytes that are not UTF-8 text at byte {e.start}: expected a "
                                               "UTF-8 text file (is this a data file?)")) from None
    return parse_text(text, path, ManifestError, base_dir=dirname(path), fmt="json", bounds=MANIFEST)


def load_manifest(path: str) -> Manifest:
    """A manifest read and checked as ``validate`` checks it, on any file system.

    Args:
        path: the manifest, ``__manifest__.json`` in a dataset directory (a local path or a URL).

    Returns:
        The checked manifest.

    Raises:
        ManifestError: every problem found, at once.
    """
    return manifest_from_document(load_document(path))


def remove_leftovers(directory: str, started: float, names: re.Pattern = files.TEMP_NAME) -> list[str]:
    """Remove the temporary files (``names`` matches) killed runs left in ``directory``; return their names.

    A local directory's: see :func:`batchloaders.prepare.files.remove_leftovers`. A URL's cannot be locked:
    those last written more than ``files.UNLOCKED_AGE`` seconds before this run ``started``.
    """
    if url_scheme(directory) is None:
        return files.remove_leftovers(directory, started, names)
    gfile = tf_io().gfile
    removed = []
    for name in listing(directory):
        path = join(directory, name)
        if names.fullmatch(name) and gfile.stat(path).mtime_nsec / 1e9 < started - files.UNLOCKED_AGE:
            remove(path)
            removed.append(name)
    return removed
