"""The errors that stop ``write_manifest`` and ``write_index`` before they write anything, each with its
problems located: a data file and its record, a manifest and its JSON path, a directory, or an argument.

An argument's problem has the file :data:`ARGUMENTS` and the argument's name as its path (``pattern``,
``raws``); its message begins with the value given. A problem whose path is ``file`` is the whole file or
directory; one whose path is another word (``directory``, ``files``, ``manifest``, ``features``) has a
message that names the place itself.
"""
from __future__ import annotations

from typing import Sequence

from batchloaders.errors import DataError, ManifestError, Problem
from batchloaders.prepare.files import located
from batchloaders.read.records import shown

ARGUMENTS = "<arguments>"  # the file of a problem in an argument the caller gave


class DamagedFiles(DataError):
    """Data files are damaged, cannot be read, or disagree with their manifest entries: nothing was written.

    Args:
        found: ``(data file, problem)`` pairs, the problem said without the file in front.
        outcome: what was not written (``no manifest written``).

    Attributes:
        found: as given.
        outcome: as given.
    """

    def __init__(self, found: Sequence[tuple[str, str]], outcome: str):
        super().__init__([located(shown(path), line) for path, line in found])
        self.found = tuple(found)
        self.outcome = outcome


class InvalidResult(ManifestError):
    """The manifest a run would write is invalid (its problems), so it was not written.

    Args:
        problems: the new manifest's problems.
        outcome: what was not done (``no manifest written``).

    Attributes:
        outcome: as given.
    """

    def __init__(self, problems: Sequence[Problem], outcome: str):
        super().__init__(problems)
        self.outcome = outcome


class InvalidExisting(ManifestError):
    """The manifest already there is invalid (its problems): it must be fixed or removed first."""


def refuse_problems(files: Sequence[str], found: Sequence[Sequence[str]], outcome: str) -> None:
    """Raise the problems of the data files, if there are any.

    Args:
        files: the data files.
        found: ``found[i]`` the problems of ``files[i]``, without the file in front.
        outcome: what was not written.

    Raises:
        DamagedFiles: naming every problem, when there are any.
    """
    problems = [(path, line) for path, lines in zip(files, found) for line in lines]
    if problems:
        raise DamagedFiles(problems, outcome)
