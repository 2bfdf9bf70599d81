"""TensorFlow imported without its native log lines: by our commands, and by default in programs that
import this package first.

Importing TensorFlow 2.21 prints absl, oneDNN, CPU-feature and CUDA-driver lines from C++ straight
to file descriptor 2, before ``TF_CPP_MIN_LOG_LEVEL`` is read (tensorflow/tensorflow#100442), so
neither that variable nor Python's ``logging`` can hold them back; the variable is read once, at
that import, for every later native line (a failed cuInit, the TFRecordDataset buffer-size line,
which TensorFlow logs whatever ``buffer_size`` is given). So TensorFlow is imported with descriptor 2
pointed at a temporary file, after setting ``TF_CPP_MIN_LOG_LEVEL`` to 3 unless it is set. If the
import fails, what it printed is shown with the error.

Our commands (``describe``, ``bench``, ``check-data``, ``verify``, ``manifest``, ``make demo``) do
so always; ``-v`` keeps everything. ``import batchloaders`` makes the first import of TensorFlow
after it (by ``build_input_fn``, Keras or the program) quiet too, unless ``TF_CPP_MIN_LOG_LEVEL``
is set by then: a program that sets it gets TensorFlow as it is.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import os
import sys
import tempfile

LEVEL = "TF_CPP_MIN_LOG_LEVEL"


@contextlib.contextmanager
def native_stderr_to(file) -> None:
    """Point file descriptor 2 (what C++ writes to) at ``file`` for the block; Python's sys.stderr too."""
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2 (a windowed program): nothing to hold back
        yield
        return
    _flush_stderr()
    try:
        os.dup2(file.fileno(), 2)
        yield
    finally:
        _flush_stderr()
        os.dup2(saved, 2)
        os.close(saved)


def _flush_stderr() -> None:
    if sys.stderr is not None:  # None in a windowed program
        sys.stderr.flush()


def import_tensorflow(verbose: bool = False):
    """``import tensorflow`` for a command: quiet unless ``verbose`` or the user chose a log level."""
    if verbose or "tensorflow" in sys.modules:
        import tensorflow

        return tensorflow
    os.environ.setdefault(LEVEL, "3")  # native logs after the import (e.g. a failed cuInit)
    with tempfile.TemporaryFile() as captured:
        try:
            with native_stderr_to(captured):
                import tensorflow
        except BaseException:
            captured.seek(0)
            if sys.stderr is not None:
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
    ``describe``, a data tool, Keras), a quiet one; then steps aside. ``unless_level_set``: an import
    after the program set ``TF_CPP_MIN_LOG_LEVEL`` is left as TensorFlow makes it."""

    def __init__(self, *, unless_level_set: bool = False):
        self.unless_level_set = unless_level_set

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        if self.unless_level_set and LEVEL in os.environ:
            return None
        import_tensorflow()
        return importlib.util.spec_from_loader(name, _Imported())


def install() -> None:
    """For the commands: the first import of TensorFlow in this process, if any, is quiet."""
    uninstall()
    if "tensorflow" not in sys.modules:
        sys.meta_path.insert(0, _QuietFirstImport())


def install_by_default() -> None:
    """For ``import batchloaders``: the first import of TensorFlow is quiet unless the program set
    ``TF_CPP_MIN_LOG_LEVEL`` (now or before that import)."""
    if ("tensorflow" not in sys.modules and LEVEL not in os.environ
            and not any(isinstance(f, _QuietFirstImport) for f in sys.meta_path)):
        sys.meta_path.insert(0, _QuietFirstImport(unless_level_set=True))


def uninstall() -> None:
    """For ``-v``: TensorFlow, if imported later, as it is."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _QuietFirstImport)]
