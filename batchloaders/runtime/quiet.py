"""TensorFlow imported without its native start-up lines, for our own commands.

Importing TensorFlow 2.21 prints absl, oneDNN, CPU-feature and CUDA-driver lines from C++ straight
to file descriptor 2, before ``TF_CPP_MIN_LOG_LEVEL`` is read (tensorflow/tensorflow#100442), so
neither that variable nor Python's ``logging`` can hold them back. Our commands (``describe``,
``bench``, ``check-data``, ``verify``, ``manifest``, ``make demo``) therefore import it with
descriptor 2 pointed at a temporary file, and set ``TF_CPP_MIN_LOG_LEVEL`` so that later native
logs stay out too (unless the user set it). If the import fails, what it printed is shown with the
error. ``-v`` keeps everything. Library users get TensorFlow as it is.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import os
import sys
import tempfile


@contextlib.contextmanager
def native_stderr_to(file) -> None:
    """Point file descriptor 2 (what C++ writes to) at ``file`` for the block; Python's sys.stderr too."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        os.dup2(file.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def import_tensorflow(verbose: bool = False):
    """``import tensorflow`` for a command: quiet unless ``verbose`` or the user chose a log level."""
    if verbose or "tensorflow" in sys.modules:
        import tensorflow

        return tensorflow
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # native logs after the import (e.g. a failed cuInit)
    with tempfile.TemporaryFile() as captured:
        try:
            with native_stderr_to(captured):
                import tensorflow
        except BaseException:
            captured.seek(0)
            sys.stderr.write(captured.read().decode("utf-8", "replace"))
            raise
    return tensorflow


class _Imported(importlib.abc.Loader):
    """Hands the import system the module :class:`_QuietFirstImport` imported already."""

    def create_module(self, spec):
        return sys.modules[spec.name]

    def exec_module(self, module):
        pass


class _QuietFirstImport(importlib.abc.MetaPathFinder):
    """Makes the first ``import tensorflow``, wherever it happens (a plugin's step traced by
    ``describe``, a data tool), a quiet one; then steps aside."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        import_tensorflow()
        return importlib.util.spec_from_loader(name, _Imported())


def install() -> None:
    """For the commands: the first import of TensorFlow in this process, if any, is quiet."""
    if "tensorflow" not in sys.modules and not any(isinstance(f, _QuietFirstImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietFirstImport())
