"""``batchloaders manifest DIR``: write or update ``DIR/__manifest__.json`` from the data files under DIR.

Every data file (those ``--pattern`` matches, by default the ``*.tfrecords``,
``*.tfrecord``, ``*.tfrec`` and ``*-00000-of-00002`` shards a ``dir`` dataset finds) is read
whole, with a progress line on stderr, and listed in ``files`` with its
name (relative to DIR, '/' between directories), ``num_records``,
``size_bytes`` and ``sha256``. A damaged file (see :mod:`batchloaders.cli.verify`)
stops the command: no manifest is written with counts that are wrong.

The keys an existing manifest holds (``compression``, ``allow_var_len``,
``features`` and any other) are kept. When it declares no features, or there
is no manifest yet, the features are inferred from the first records of every
file (:mod:`batchloaders.prepare.infer`), along with ``allow_var_len``;
``compression`` is told from the files' bytes when the manifest does not
give it. ``--raw NAME=DTYPE[SHAPE]`` declares a bytes feature a raw tensor,
in an existing manifest too, once the records looked at agree with it. The new
manifest is checked as ``validate`` would before it
replaces the old one (written to a temporary file, then renamed; the temporary
files of a run that was killed while writing are removed by the next run). The summary
(long lines wrapped here) ends with what was guessed, for the user to check::

    $ batchloaders manifest data/mnist
    features inferred from 128 records of 2 files (tf.train.Example, compression null): image (string []),
        label (int64 [])
    wrote data/mnist/__manifest__.json: 2 files, 60,000 records, 47,040,000 bytes
    image: every value is 784 bytes: probably a raw tensor (uint8, int8 or bool [784] or [28, 28]; ...);
        declare it with --raw 'image=uint8[28,28]'
    guessed: compression null (told from the files' bytes)
    guessed: allow_var_len false (tf.train.Example records: none of the 128 records looked at holds ...)
    guessed: image: string [] (a bytes_list of 1 value in every record looked at)
    guessed: label: int64 [] (an int64_list of 1 value in every record looked at)

In a data directory TFDS prepared, the features are TFDS's own description of
them (``features.json``, read by :mod:`batchloaders.prepare.tfds_info`), and
``--split NAME`` lists the files of that split only.

Exit status: 0 when the manifest was written, 2 for a wrong ``--pattern``,
``--raw`` or ``--split``, 1 otherwise.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import Sequence, TextIO

from batchloaders.errors import BatchLoaderError, ConfigError, ManifestError, Problem
from batchloaders.config.datasets import shorten
from batchloaders.cli.progress import Printed
from batchloaders.prepare import tfds_info
from batchloaders.prepare.beam import Runner
from batchloaders.prepare.infer import Raw, parse_raw
from batchloaders.prepare.manifest import write_manifest
from batchloaders.prepare.refused import ARGUMENTS, DamagedFiles, InvalidExisting, InvalidResult
from batchloaders.read.records import count, shown

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2  # as the other commands (cli.main)
OPTIONS = {"pattern": "--pattern", "raws": "--raw"}  # the option of each argument a located problem names
SENTENCES = ("directory", "files", "manifest", "features")  # problem paths whose message names its place


class Usage(Exception):
    """A ``--raw`` or ``--split`` the command cannot use: a usage error (exit 2); the message says why."""


@dataclasses.dataclass(frozen=True)
class Choices:
    """What ``batchloaders manifest`` is told besides the directory.

    Attributes:
        pattern: the data files to list (``--pattern``). None: those a ``dir`` dataset finds.
        raws: ``NAME=DTYPE[SHAPE]`` declarations of bytes features that are raw tensors (``--raw``).
        split: a TFDS-prepared directory's split whose files the manifest lists (see
            :mod:`batchloaders.prepare.tfds_info`).
        runner: the Beam runner that reads the files, one element per file; None: this process reads them.
    """

    pattern: str | None = None
    raws: tuple[str, ...] = ()
    split: str | None = None
    runner: Runner | None = None


def run(directory: str, out: TextIO | None = None, err: TextIO | None = None, *, pattern: str | None = None,
        raws: Sequence[str] = (), split: str | None = None) -> int:
    """Write or update ``directory/__manifest__.json`` from the data files under it (``batchloaders manifest``).

    Problems are printed, not raised.

    Args:
        directory: the dataset directory.
        out: where the summary goes. Default: stdout.
        err: where problems and progress go. Default: stderr.
        pattern: the data files to list (``--pattern``). Default: those a ``dir`` dataset finds.
        raws: ``NAME=DTYPE[SHAPE]`` declarations of bytes features that are raw tensors (``--raw``).
        split: a TFDS-prepared directory's split whose files the manifest lists (see
            :mod:`batchloaders.prepare.tfds_info`).

    Returns:
        The exit status: 0 when written, 2 for a ``pattern``, ``raws`` or ``split`` that is wrong, 1 for any
        other problem.
    """
    return run_with(directory, Choices(pattern, tuple(raws), split), out, err)


def run_with(directory: str, choices: Choices, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """:func:`run` with its choices in one value, a Beam runner among them (``batchloaders manifest --runner``).

    Args:
        directory: the dataset directory.
        choices: the pattern, raw declarations, split and runner.
        out: where the summary goes. Default: stdout.
        err: where problems and progress go. Default: stderr.

    Returns:
        The exit status, as :func:`run` returns it.
    """
    out, err = out or sys.stdout, err or sys.stderr
    try:
        raws = raw_specs(choices.raws)
        pattern = choices.pattern
        if choices.split is not None:
            tfds = tfds_info.read_info(directory) if tfds_info.is_tfds_dir(directory) else None
            pattern = split_files(directory, tfds, choices.split, pattern)
        written = write_manifest(directory, pattern=pattern, raws=raws, runner=choices.runner, reporter=Printed(err))
    except (Usage, BatchLoaderError) as error:
        for line in error_lines(error):
            print(f"batchloaders manifest: error: {line}", file=err)
        return EXIT_USAGE if is_usage(error) else EXIT_INVALID
    for line in written.lines():
        print(line, file=out)
    return EXIT_OK


def error_lines(error: Exception) -> list[str]:
    """What the data commands print of an error that stopped them, one line each (after ``... error:``).

    Args:
        error: a Usage, or a BatchLoaderError (those of :mod:`batchloaders.prepare.refused` with what was not
            written after their problems).

    Returns:
        The lines: an argument's problem names its option (``--pattern``), a data file's problem follows the
        file.
    """
    if not isinstance(error, BatchLoaderError):
        return str(error).splitlines()
    if isinstance(error, DamagedFiles):
        return [f"{shown(path)}: {line}" for path, line in error.found] + [
            f"{error.outcome}: {count(len(error.found), 'problem')} in the data files (see `batchloaders verify`)"]
    lines = [line for problem in error.problems for line in _problem_line(problem).splitlines()]
    if isinstance(error, InvalidResult):
        lines.append(f"{error.outcome}: it would be invalid")
    elif isinstance(error, InvalidExisting):
        lines.append("fix or remove the existing manifest first")
    return lines


def is_usage(error: Exception) -> bool:
    """Whether an error is the command line's (exit 2): a Usage, or a problem in an option's value."""
    return isinstance(error, Usage) or (isinstance(error, ConfigError)
                                        and any(problem.file == ARGUMENTS for problem in error.problems))


def _problem_line(problem: Problem) -> str:
    if problem.file == ARGUMENTS:
        return f"{OPTIONS.get(problem.path, problem.path)} {problem.message}"
    if problem.path == "file":
        return f"{problem.file}: {problem.message}"
    return problem.message if problem.path in SENTENCES else str(problem)


def raw_specs(texts: Sequence[str]) -> list[Raw]:
    """The ``--raw`` declarations; Usage naming the first one that is malformed or repeats a feature."""
    specs: dict[str, Raw] = {}
    for text in texts:
        try:
            raw = parse_raw(text)
        except ValueError as error:
            raise Usage(f"--raw {text!r}: {error}") from None
        if raw.name in specs:
            raise Usage(f"--raw {text!r}: feature {raw.name!r} is already declared by --raw {specs[raw.name].text!r}: "
                        "expected each feature once")
        specs[raw.name] = raw
    return list(specs.values())


def split_files(directory: str, tfds: tfds_info.TfdsInfo | None, split: str | None,
                pattern: str | None) -> str | None:
    """The pattern of the files to list: ``pattern``, or the glob of a TFDS ``split``'s files.

    Args:
        directory: the dataset directory.
        tfds: TFDS's description of it, None when it holds none.
        split: the split named by ``--split``, or None.
        pattern: the glob named by ``--pattern``, or None.

    Returns:
        The pattern (None: the default one).

    Raises:
        Usage: ``split`` with ``pattern``, in a directory without TFDS's files, or naming no split there.
    """
    if split is None:
        return pattern
    if pattern is not None:
        raise Usage(f"--split {split!r} and --pattern {shorten(pattern)} both choose the data files: expected one "
                    "of them")
    if tfds is None:
        raise Usage(f"--split {split!r}: {directory} holds no {tfds_info.INFO_NAME} and {tfds_info.FEATURES_NAME} "
                    "as TFDS writes them: expected a data directory TFDS prepared (--pattern chooses the files of "
                    "other directories)")
    try:
        return tfds_info.split_pattern(tfds, split, directory)
    except ManifestError as error:
        raise Usage(str(error)) from None
