"""A progress line on stderr for commands that read whole data files (``verify``, ``manifest``), and the
notes of a preparation run printed (:class:`Printed`).

On a terminal it is one line redrawn with carriage returns, at most ten
times a second, such as ``verify: 3/40 files, 12,345 records, 45.2 MB``.
Anywhere else (a log file, a CI job, a test) it writes a plain line after a
file only when two seconds have passed since the last one, so a short run
writes nothing at all.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

from batchloaders.prepare.report import Reporter

TTY_INTERVAL = 0.1  # seconds between redraws on a terminal
LOG_INTERVAL = 2.0  # seconds between lines elsewhere
MB = 1e6


class Progress:
    """Counts files, records and bytes read, and shows them on ``stream`` (default: sys.stderr)."""

    def __init__(self, command: str, total_files: int, stream: TextIO | None = None):
        self.command, self.total = command, total_files
        self.stream = stream if stream is not None else sys.stderr
        try:
            self.tty = bool(self.stream.isatty())
        except (AttributeError, ValueError):
            self.tty = False
        self.files = self.records = self.bytes = 0
        self.last = time.monotonic()  # nothing is shown before the first interval has passed
        self.width = 0  # characters of the line on screen (terminal only); 0 when none is

    def text(self) -> str:
        return (f"{self.command}: {self.files}/{self.total} files, {self.records:,} records, "
                f"{self.bytes / MB:.1f} MB")

    def advance(self, records: int = 0, nbytes: int = 0) -> None:
        """Count records and bytes read; on a terminal, redraw when due."""
        self.records += records
        self.bytes += nbytes
        if self.tty:
            self._draw()

    def file_done(self) -> None:
        self.files += 1
        if self.tty:
            self._draw()
        elif time.monotonic() - self.last >= LOG_INTERVAL:
            self.last = time.monotonic()
            self.stream.write(self.text() + "\n")
            self.stream.flush()

    def print(self, line: str, out: TextIO) -> None:
        """Print a result line to ``out`` without leaving it mixed with the progress line."""
        self.clear()
        print(line, file=out)
        out.flush()

    def clear(self) -> None:
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0

    def close(self) -> None:
        self.clear()

    def _draw(self) -> None:
        now = time.monotonic()
        if now - self.last < TTY_INTERVAL:
            return
        self.last = now
        text = self.text()
        self.stream.write("\r" + text + " " * max(0, self.width - len(text)))
        self.stream.flush()
        self.width = max(self.width, len(text))


class Printed(Reporter):
    """A preparation run's notes as ``batchloaders OPERATION: LINE`` lines, and its progress, on ``stream``."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def note(self, operation: str, line: str) -> None:
        """Print the note after the command's name."""
        print(f"batchloaders {operation}: {line}", file=self.stream)

    def progress(self, operation: str, total_files: int) -> Progress:
        """A progress line on the stream."""
        return Progress(operation, total_files, self.stream)
