"""Run one function per element on an Apache Beam runner and bring the results back in order.

The data commands give a runner one element per data file (or per output shard) and get each element's
result back, in the order given, on the machine that started the run; what they write from those results
(a manifest, indexes) is written there, exactly as without a runner. A result goes back through a staging
directory both sides can reach: under the ``temp_location`` option when given (a bucket, for a runner whose
workers run elsewhere), else a local temporary directory (the DirectRunner, or workers sharing this file
system). Each result is written whole under a temporary name and renamed, so that a retried element
(runners retry a failed bundle) leaves one result. Results are JSON (bytes as base64): whoever can write
the staging directory can change what the launcher reads back, but not make it run code.

The per-element functions return the problems they find as values instead of raising them: a damaged file
is then reported once, with every other damaged file, and not retried as a runner retries a failure. An
exception that escapes one (a bug, a worker lost) fails the run: :class:`BeamFailed`.

Beam is imported only here, and only when a run starts (:func:`import_beam`).
"""
from __future__ import annotations

import base64
import contextlib
import dataclasses
import difflib
import io
import json
import logging
import numbers
import tempfile
import uuid
from typing import Callable, Mapping, Sequence

from batchloaders.errors import BatchLoaderError, ConfigError, Problem
from batchloaders.prepare.paths import join, remove_tree, tf_io

INSTALL = "pip install 'batchloaders[beam]'"
RUNNERS = ("DirectRunner", "DataflowRunner", "FlinkRunner", "SparkRunner", "PortableRunner", "PrismRunner")
# Runners that hand the options they do not know to a job service (a Java pipeline's own options among them):
# for these an unknown key may be meant, for the others it is a misspelling Beam would silently drop.
PASS_THROUGH = ("FlinkRunner", "SparkRunner", "PortableRunner", "PrismRunner")
BYTES_KEY = "$base64"  # a result's bytes, as JSON: {"$base64": "..."}


class BeamNotInstalled(ConfigError):
    """A runner was named, but Apache Beam is not installed."""


class BeamFailed(BatchLoaderError):
    """The Beam run failed for a reason no element reported as a problem (the runner's message says which)."""


@dataclasses.dataclass(frozen=True)
class Runner:
    """A Beam runner and the pipeline options it is given.

    Attributes:
        name: the runner, e.g. ``DirectRunner`` or ``DataflowRunner``.
        options: ``(key, value)`` pairs for Beam's ``PipelineOptions``, in the order given; a value of None is a
            flag without a value (``--beam-option save_main_session``).
    """

    name: str
    options: tuple[tuple[str, str | None], ...] = ()

    def flags(self) -> list[str]:
        """The command-line flags ``PipelineOptions`` parses."""
        return [f"--runner={self.name}"] + [f"--{key}" if value is None else f"--{key}={value}"
                                            for key, value in self.options]

    def option(self, key: str) -> str | None:
        """The last value given to option ``key``, None when none was."""
        return next((value for name, value in reversed(self.options) if name == key), None)


def runner_from(name: str | None, options: Mapping[str, object] | Sequence[str] | None = None) -> Runner | None:
    """The runner a command line or an API call names, None for none.

    Args:
        name: the runner's name (``--runner``), None to run without Beam.
        options: ``KEY=VALUE`` strings (``--beam-option``, ``KEY`` alone for a flag) or a mapping of them.

    Returns:
        The runner, or None when ``name`` is None.

    Raises:
        ConfigError: options without a runner, an empty runner name, or an option that is no ``KEY=VALUE``.
    """
    pairs: list[tuple[str, str | None]] = []
    if isinstance(options, Mapping):
        pairs = [(str(key), None if value is None else str(value)) for key, value in options.items()]
    else:
        for text in options or ():
            key, sep, value = str(text).partition("=")
            pairs.append((key.strip().lstrip("-"), value if sep else None))
    bad = [key for key, _ in pairs if not key.replace("_", "").replace("-", "").isalnum()]
    if bad:
        raise ConfigError(Problem("--beam-option", "$", f"found {bad[0]!r}: expected KEY=VALUE, KEY a Beam pipeline "
                                                       "option such as direct_num_workers or project"))
    if name is None:
        if pairs:
            raise ConfigError(Problem("--beam-option", "$", "found Beam options without a runner: expected "
                                                           f"--runner too (one of {', '.join(RUNNERS)})"))
        return None
    if not str(name).strip():
        raise ConfigError(Problem("--runner", "$", f"found an empty name: expected a Beam runner such as "
                                                  f"{', '.join(RUNNERS)}"))
    return checked(Runner(str(name).strip(), tuple(pairs)))


def checked(runner: Runner) -> Runner:
    """``runner``, once Beam knows its name and ``PipelineOptions`` accepts each of its options (before anything
    is written).

    Raises:
        BeamNotInstalled: Apache Beam is not installed.
        ConfigError: a runner name Beam does not know or cannot load, a value the option does not take, or a
            key no Beam option has (a runner that passes unknown options on to its job service, such as
            FlinkRunner, may be given any key).
    """
    import_beam()
    from apache_beam.options.pipeline_options import PipelineOptions  # deferred: part of the optional Beam

    _check_name(runner.name)
    known = None
    for key, value in runner.options:
        flag = f"--{key}" if value is None else f"--{key}={value}"
        where = Problem("--beam-option", flag[2:], "")
        said = io.StringIO()
        try:  # argparse prints its usage and exits on a bad value: kept to its last line
            with contextlib.redirect_stderr(said):
                PipelineOptions([flag]).get_all_options()
        except SystemExit:
            found = (said.getvalue().strip().splitlines() or ["rejected"])[-1].split("error: ", 1)[-1]
            raise ConfigError(dataclasses.replace(where, message=f"found {found}: expected a value the Beam "
                                                                 f"option {key} takes")) from None
        if runner.name not in PASS_THROUGH:
            known = known or set(PipelineOptions([]).get_all_options(drop_default=False))
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                raise ConfigError(dataclasses.replace(where, message=(
                    f"found the key {key!r}, which no Beam pipeline option has: expected "
                    + (f"{close[0]!r}?" if close else "an option such as direct_num_workers or project"))))
    return runner


def _check_name(name: str) -> None:
    """ConfigError at ``--runner NAME`` when Beam has no runner ``name`` (its short or full dotted name).

    Beam's own lookup decides, as the run would; making the runner object runs no pipeline.
    """
    from apache_beam.options.pipeline_options import StandardOptions  # deferred: part of the optional Beam
    from apache_beam.runners.runner import create_runner

    close = None
    try:
        create_runner(name)
        return
    except ValueError:
        found = "found no Beam runner of that name"
        close = next(iter(difflib.get_close_matches(name, StandardOptions.KNOWN_RUNNER_NAMES, n=1)), None)
    except (ImportError, AttributeError) as error:  # a dotted name, or a runner whose extra is not installed
        found = f"found a runner Beam cannot load ({_first_lines(error, 1)})"
    valid = (f"one of Beam's runners ({', '.join(StandardOptions.KNOWN_RUNNER_NAMES)}) or the full dotted name of a "
             "PipelineRunner subclass")
    raise ConfigError(Problem("--runner", name, f"{found}: expected " + (f"{close!r}? ({valid})" if close else valid)))


def import_beam():
    """The ``apache_beam`` module; BeamNotInstalled saying how to install it when it is missing."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # Beam warns at import about cloud clients a local run does not use
    try:
        import apache_beam  # deferred: an optional dependency, imported only when a runner is named
    except ImportError as error:
        raise BeamNotInstalled(Problem("--runner", "$", f"Apache Beam is not installed ({error}): install it with "
                                                       f"{INSTALL}, or leave --runner out to run on this machine")
                               ) from None
    finally:
        logging.disable(previous)
    return apache_beam


def map_elements(function: Callable, items: Sequence, runner: Runner, *, label: str) -> list:
    """``[function(item) for item in items]``, each call one Beam element on ``runner``.

    Args:
        function: a picklable function of one item (a module's function, or a ``functools.partial`` of one);
            it returns its item's problems as values and raises only for what no item can cause.
        items: the elements (picklable), one a data file or an output shard.
        runner: where to run.
        label: the pipeline step's name, e.g. ``manifest``.

    Returns:
        The results, in the order of ``items``.

    Raises:
        BeamNotInstalled: Beam is not installed.
        BeamFailed: the run failed (the runner's own message), or a result did not come back.
    """
    beam = import_beam()
    from apache_beam.options.pipeline_options import PipelineOptions  # deferred: part of the optional Beam

    staging = _staging(runner)
    try:
        try:
            pipeline = beam.Pipeline(options=PipelineOptions(runner.flags()))
            _ = (pipeline
                 | f"{label}: elements" >> beam.Create(list(enumerate(items)))
                 | f"{label}: spread" >> beam.Reshuffle()  # else a runner may keep them in one bundle
                 | f"{label}: each" >> beam.Map(_apply, function, staging))
            _run(pipeline)
        except BatchLoaderError:
            raise
        except Exception as error:  # the runner's own failure, whatever its type: said as it said it
            raise BeamFailed(Problem(f"<{runner.name}>", label, f"the Beam run failed: {_first_lines(error)}")) from error
        return _collected(staging, len(items), runner, label)
    finally:
        remove_tree(staging)


def _run(pipeline) -> None:
    """Run the pipeline to its end; cancel the job (best effort) when the wait is interrupted (Ctrl-C), so that
    a remote runner's workers do not write on unattended."""
    result = pipeline.run()
    try:
        result.wait_until_finish()
    except BaseException:
        with contextlib.suppress(Exception):  # a runner may not cancel (the DirectRunner), or the job ended
            result.cancel()
        raise


def _staging(runner: Runner) -> str:
    """A new directory for the results: under the temp_location option, else a local temporary directory."""
    base = runner.option("temp_location")
    if base is None:
        return tempfile.mkdtemp(prefix="batchloaders-beam-")
    path = join(base, f"batchloaders-{uuid.uuid4().hex}")
    tf_io().gfile.makedirs(path)
    return path


def _apply(element: tuple[int, object], function: Callable, staging: str) -> None:
    """On a worker: the result of one element, written whole to the staging directory."""
    index, item = element
    blob = json.dumps(function(item), default=_plain, allow_nan=False).encode("utf-8")
    gfile = tf_io().gfile
    path = join(staging, f"{index:09d}.json")
    temp = f"{path}.{uuid.uuid4().hex}.tmp"
    with gfile.GFile(temp, "wb") as f:
        f.write(blob)
    gfile.rename(temp, path, overwrite=True)


def _collected(staging: str, total: int, runner: Runner, label: str) -> list:
    gfile = tf_io().gfile
    out = []
    for index in range(total):
        path = join(staging, f"{index:09d}.json")
        if not gfile.exists(path):
            raise BeamFailed(Problem(f"<{runner.name}>", label, f"the run ended, but element {index} left no result "
                                                              f"in {staging}: expected one per element (the "
                                                              "runner's workers must reach this directory: give "
                                                              "--beam-option temp_location=... on shared storage)"))
        with gfile.GFile(path, "rb") as f:
            out.append(_result(f.read(), path, runner, label))
    return out


def _plain(value):
    """JSON for what ``json`` does not write itself: bytes (base64), NumPy's integers and floats; else refused."""
    if isinstance(value, (bytes, bytearray)):
        return {BYTES_KEY: base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(f"a result holds a {type(value).__name__}: expected plain data (lists, dicts, strings, numbers, "
                    "bytes)")


def _result(blob: bytes, path: str, runner: Runner, label: str):
    """One element's result read back: JSON only, bytes restored."""
    def restored(obj: dict):
        if set(obj) == {BYTES_KEY} and isinstance(obj[BYTES_KEY], str):
            return base64.b64decode(obj[BYTES_KEY], validate=True)
        return obj

    try:
        return json.loads(blob.decode("utf-8"), object_hook=restored)
    except ValueError as error:  # UnicodeDecodeError, JSONDecodeError and binascii.Error are ValueErrors
        raise BeamFailed(Problem(f"<{runner.name}>", label, f"element result {path} is no JSON result ({error}): "
                                                          "expected what this run's workers write")) from None


def _first_lines(error: BaseException, most: int = 6) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()] or [type(error).__name__]
    return "\n".join(lines[:most]) + ("\n..." if len(lines) > most else "")
