"""Errors a user can cause, each carrying where in which file it was found.

Every problem is a :class:`Problem` (file, JSON path, message, optional line).
One exception carries all problems found in a document, so a user fixes them
in one pass instead of one per run. TensorFlow's errors of a running pipeline are read
back into these by runtime/translate.py.
"""
from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Iterable, Sequence


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with one place in one file, shown as 'file: path: message (line L, column C)'.

    Attributes:
        file: the file (config, manifest or data file), or a stand-in such as ``<params>`` where there is none.
        path: where in it: a JSON path such as "$.args.primary_features[1].to_name", or a data file's
            record ("record 3").
        message: what was found and what was expected.
        line: the line in the file (1-based), when known.
        column: the column in that line (1-based), when known.
    """

    file: str
    path: str
    message: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = ""
        if self.line:
            where = f" (line {self.line}, column {self.column})" if self.column else f" (line {self.line})"
        return f"{self.file}: {self.path}: {self.message}{where}"


class BatchLoaderError(ValueError):
    """Base class of every error a user can cause with a config, manifest or data.

    Its message is its problems, one a line.

    Args:
        problems: the problems found, one problem, or a message alone (then its file is ``<unknown>`` and its
            path "$").

    Attributes:
        problems: the problems, in the order given.
    """

    def __init__(self, problems: Problem | Sequence[Problem] | str):
        if isinstance(problems, str):
            problems = [Problem("<unknown>", "$", problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class ConfigError(BatchLoaderError):
    """A loader config is invalid."""


class PluginsNotChecked(ConfigError):
    """A config is valid as far as it was checked, but names types of plugins that were not imported
    (the command line imports a config's own plugins only with ``--trust-plugins``): one problem per
    item left unchecked. Raised only when nothing else is wrong."""


class ManifestError(BatchLoaderError):
    """A dataset manifest (or the dataset it describes) is invalid."""


class DataError(BatchLoaderError):
    """The records in the data files disagree with the manifest or the config."""


class ServiceError(BatchLoaderError):
    """The tf.data service a config names cannot be used (its dispatcher does not answer)."""


class ResumeError(BatchLoaderError):
    """A checkpoint of the position in the data does not fit the pipeline it is restored into."""


def path_parts(path: str) -> tuple:
    """The inverse of :func:`json_path`: "$.args.x[1]" -> ("args", "x", 1)."""
    return tuple(int(index) if index else (key or quoted)
                 for key, index, quoted in re.findall(r"\.([A-Za-z_]\w*)|\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]", path))


def json_path(parts: Iterable[str | int]) -> str:
    """Render path components as a JSON path: ("args", "x", 1) -> "$.args.x[1]"."""
    out = "$"
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
            continue
        part = str(part)
        if part.isidentifier():
            out += f".{part}"
        else:
            out += f"[{part!r}]"
    return out


# What a bare type name means to a Keras user, where spelling alone would pick another: Keras's float
# type; the integer type TFRecord files store (int64_list) and tf.data counts in; NumPy's and C's names.
MEANT = {"float": "float32", "int": "int64", "integer": "int64", "long": "int64", "double": "float64",
         "bytes": "string"}


def suggest(name: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean 'x'?)' for the choice meant or the closest one, or '' if none is close."""
    choices = [str(c) for c in choices]
    name = str(name)
    meant = MEANT.get(name.lower(), name.lower())
    if meant != name and meant in choices:
        return f" (did you mean {meant!r}?)"
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
