"""What a preparation run says while it works: notes (a temporary file of a killed run removed, a feature
left out, the files handed to a runner) and a progress counter for each pass over the data files.

The Python API says nothing (:class:`Reporter` itself); the commands pass one that prints
(:class:`batchloaders.cli.progress.Printed`). The errors that stop a run are raised, not reported.
"""
from __future__ import annotations

from typing import Callable, Protocol, TypeVar

T = TypeVar("T")


class Counter(Protocol):
    """Counts the files, records and bytes one pass over the data files has read."""

    def advance(self, records: int = 0, nbytes: int = 0) -> None:
        """Count records and bytes read."""

    def file_done(self) -> None:
        """Count a file done."""

    def close(self) -> None:
        """The pass is over (however it ended)."""


class Silent:
    """A Counter that counts nothing."""

    def advance(self, records: int = 0, nbytes: int = 0) -> None:
        """Nothing."""

    def file_done(self) -> None:
        """Nothing."""

    def close(self) -> None:
        """Nothing."""


class Reporter:
    """Where a preparation run's notes and progress go; this one says nothing."""

    def note(self, operation: str, line: str) -> None:
        """A line worth telling: ``operation`` is the one saying it (``manifest``, ``index``), ``line`` what."""

    def progress(self, operation: str, total_files: int) -> Counter:
        """A Counter for a pass of ``operation`` over ``total_files`` data files."""
        return Silent()


def counted(progress: Counter, function: Callable[..., T], path: str, *args) -> T:
    """``function(path, *args, progress=progress)``, the file counted done however it ends.

    Args:
        progress: the pass's Counter.
        function: what is done to one data file; it takes ``progress`` as a keyword.
        path: the data file.
        *args: ``function``'s other arguments.

    Returns:
        What ``function`` returns.
    """
    try:
        return function(path, *args, progress=progress)
    finally:
        progress.file_done()
