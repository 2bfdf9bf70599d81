"""The ``batchloaders`` command line.

``batchloaders validate PATH...`` checks manifests and loader configs without
importing TensorFlow, so it runs fast in CI and pre-commit hooks::

    $ batchloaders validate configs/ data/mnist/__manifest__.json
    OK configs/mnist.yaml
    configs/typo.yaml: $.args.tagret_batch_size: unknown key 'tagret_batch_size' (did you mean ...) (line 6)

Every file is checked; a last line counts the invalid ones. Exit status: 0 when every
file is valid, 1 when any is not, 2 on a usage error. ``validate --data`` then runs
check-data on every valid config (this imports TensorFlow). A config whose data files are
not all listed in its manifest's ``files`` gets a ``warning:`` line (``--strict``: a problem).

A config is data: no command imports the plugins a config's ``plugins:`` list names unless
given ``--trust-plugins`` (or the file itself with ``--plugins``), so that validating a pull
request's configs in CI runs none of its code. Untrusted, ``validate`` checks everything but
the items of plugin types and prints a ``note:`` line per such item (exit 0; 1 with
``--strict-plugins``); the commands that need the types (describe, bench, preview) fail naming them; the data
tools (check-data, verify, index) read the config's dataset only, which needs none.
A closed output pipe (``describe CONFIG | head -1``) ends the command quietly with status 141.

``batchloaders describe CONFIG`` prints what a config compiles to (tensors,
padding, parsing path); ``batchloaders bench CONFIG`` runs it and prints its
throughput.

Commands that read data files (this package), each printing one line per
problem, path first, and exiting 1 when there is any:

* ``batchloaders check-data CONFIG [--records N]``: the first N records (default 8) of
  every data file against every feature of the manifest, in seconds, and unlisted files;
* ``batchloaders verify CONFIG|DIR``: every data file read whole: damaged frames, cut
  files and streams, appended bytes, counts, sizes and checksums against the manifest's
  ``files``, every record against the features, unlisted and missing files;
* ``batchloaders manifest DIR``: writes or updates ``DIR/__manifest__.json`` with every
  file's record count, size and SHA-256, inferring the features when none are declared.
* ``batchloaders index DIR|CONFIG``: writes ``<data file>.index`` (each record's byte offset)
  beside every uncompressed data file and records it in the manifest's ``files`` (a DIR's manifest
  first, as ``manifest`` writes it, when there is none).

``batchloaders serve --dispatcher`` / ``serve --worker ADDRESS`` start TensorFlow's tf.data service
servers (for configs with a ``service`` block), print the address they listen on and serve until
interrupted.

All but validate (without --data) import TensorFlow, inside the command.
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from typing import Callable, Sequence, TextIO

from batchloaders import __version__
from batchloaders.errors import BatchLoaderError, PluginsNotChecked
from batchloaders.config import kinds, type_schemas
from batchloaders.config.config import load_config
from batchloaders.config.datasets import quote_entries, unlisted_files
from batchloaders.config.manifest import load_manifest
from batchloaders.config.service_rules import address_problem
from batchloaders.runtime.quiet import import_tensorflow, install, uninstall
from batchloaders.core.model import Dataset
from batchloaders.transform import builtin_types, plugins

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
# 128 + SIGPIPE: what a shell reports for a program stopped by a closed pipe (`yes | head -1`), so that
# `set -o pipefail` sees the command did not finish, as with any other program.
EXIT_BROKEN_PIPE = 141
DOCUMENT_SUFFIXES = (".yaml", ".yml", ".json")


def is_manifest(path: str) -> bool:
    """A dataset manifest is recognised by its file name; everything else is a loader config."""
    name = os.path.basename(path)
    return name == "__manifest__.json" or name.endswith("manifest.json")


def expand(paths: Sequence[str]) -> list[str]:
    """Files named directly, plus the .yaml/.yml/.json files directly inside named directories.

    Raises ValueError for a directory holding none, since nothing there would be checked.
    """
    files = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(os.path.join(path, n) for n in os.listdir(path)
                           if n.endswith(DOCUMENT_SUFFIXES) and os.path.isfile(os.path.join(path, n)))
            if not found:
                raise ValueError(f"no .yaml, .yml or .json file in directory {path}")
            files.extend(found)
        else:
            files.append(path)  # a missing file is reported by the loader, as a problem of that file
    return files


def _checked(path: str, trust_plugins: bool = False) -> tuple[list[str], str, list[str], list[str]]:
    """(problems as printable lines, what was assumed, the items of plugin types left unchecked as printable
    lines, warnings as printable lines) of one manifest or config."""
    try:
        if is_manifest(path):
            load_manifest(path)
        else:
            config = load_config(path, trust_plugins=trust_plugins)
            warnings = [line for dataset in [s.dataset for s in config.sources] or [config.dataset]
                        for line in unlisted_warnings(path, dataset)]  # a mixture's sources: each dataset
            if config.model_assumed:
                return [], (f" (no model block: every feature is taken as a model input, none as a target: "
                            f"{', '.join(config.inputs)}; build_input_fn(config, model=...) takes the model's "
                            "names)"), [], warnings
            return [], "", [], warnings
    except PluginsNotChecked as notice:  # valid but for what its plugins' types would say
        return [], "", [str(problem) for problem in notice.problems], []
    except BatchLoaderError as error:
        return [str(problem) for problem in error.problems], "", [], []
    except Exception as error:  # a bug of ours: report it against this file and go on to the next
        return [f"{path}: $: internal error while checking this file ({type(error).__name__}: {error}); "
                "please report it"], "", [], []
    return [], "", [], []


def unlisted_warnings(path: str, dataset: Dataset) -> list[str]:
    """The line (a list of one, or empty) naming the data files of a config's ``dir`` dataset that the manifest's
    ``files`` does not list (:func:`batchloaders.config.datasets.unlisted_files`).

    Args:
        path: the config, as the line names it.
        dataset: its resolved dataset.

    Returns:
        "c.yaml: $.args.dataset: data file 'part-2.tfrecords' matches the pattern but is not listed in the files
        of the manifest d/__manifest__.json: ...", naming the first few files by their path relative to data_dir.
    """
    unlisted = unlisted_files(dataset)
    if not unlisted:
        return []
    root = os.path.dirname(dataset.manifest.path)
    names = [repr(os.path.relpath(file, root).replace(os.sep, "/")) for file in unlisted]
    one = len(names) == 1
    return [f"{path}: {dataset.json_path}: data file{'' if one else 's'} {quote_entries(names)} "
            f"match{'es' if one else ''} the pattern but {'is' if one else 'are'} not listed in the files of the "
            f"manifest {os.path.relpath(dataset.manifest.path)}: {'its' if one else 'their'} records are read but "
            "not counted or checked against it (added after the manifest was written? `batchloaders manifest "
            f"{os.path.relpath(root)}` lists {'it' if one else 'them'})"]


def _notices(lines: list[str], kind: str, strict: bool, out: TextIO) -> list[str]:
    """``lines`` as problems when ``strict``; else each printed as a ``kind:`` line (the file stays valid) and none
    returned."""
    if strict:
        return lines
    for line in lines:  # a notice, not a failure: CI stays green
        print(f"{kind}: {line}", file=out)
    return []


def validate(paths: Sequence[str], out: TextIO | None = None, *, data: bool = False, trust_plugins: bool = False,
             strict_plugins: bool = False, strict: bool = False) -> int:
    """Check every file (directories non-recursively), print one line per problem, return the exit code.

    ``data``: then run check-data on every valid config (this imports TensorFlow). ``trust_plugins``:
    import the plugins each config lists (runs their code); else an item of a plugin type is left
    unchecked, with a ``note:`` line, and makes the file invalid only with ``strict_plugins``. A config
    whose data files are not all listed in its manifest's ``files`` gets a ``warning:`` line, and is
    invalid only with ``strict``.
    """
    out = out or sys.stdout
    try:
        files = expand(paths)
    except ValueError as error:
        print(f"batchloaders validate: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    invalid = problems = 0
    valid_configs = []
    # Each problem is shown once, under the first path naming its file: a config reports its manifest's
    # problems too, under the path it resolved, which may name a manifest given as well in another way.
    shown: dict[tuple[str, str], str] = {}  # (real path, rest of the line) -> the path shown
    for path in files:  # every file is checked, whatever the ones before it held
        lines, assumed, notes, warnings = _checked(path, trust_plugins)
        lines = lines + _notices(notes, "note", strict_plugins, out) + _notices(warnings, "warning", strict, out)
        fresh, seen_under = [], None
        for line in lines:
            file, _, rest = line.partition(": $")
            key = (os.path.realpath(file), rest)
            if key in shown:
                seen_under = seen_under or shown[key]
            else:
                shown[key] = file
                fresh.append(line)
        problems += len(fresh)
        if lines and not fresh:
            fresh = [f"{path}: $: invalid: its problems are those shown above for {seen_under}"]
        for line in fresh or [f"OK {path}{assumed}"]:
            print(line, file=out)
        invalid += bool(lines)
        if not lines and not is_manifest(path):
            valid_configs.append(path)
    status = EXIT_OK
    if invalid:
        print(f"{invalid} of {len(files)} file{'s' * (len(files) != 1)} invalid ({problems} "
              f"problem{'s' * (problems != 1)})", file=out)
        status = EXIT_INVALID
    if data and valid_configs:
        _quiet_tensorflow()
        from batchloaders.cli import check_data  # deferred: imports TensorFlow

        for path in valid_configs:
            print(f"data of {path}:", file=out)
            try:
                status = max(status, check_data.run(path, out=out, trust_plugins=trust_plugins))
            except BatchLoaderError as error:  # the data changed since the config was checked
                for line in str(error).splitlines():
                    print(line, file=out)
                status = EXIT_INVALID
    return status


def _run_validate(args: argparse.Namespace) -> int:
    return validate(args.paths, data=args.data, trust_plugins=args.trust_plugins, strict_plugins=args.strict_plugins,
                    strict=args.strict)


def _plugin_entries(values: Sequence[str] | None) -> list[str]:
    """--plugins a --plugins b,c -> [a, b, c]."""
    return [e.strip() for value in values or () for e in value.split(",") if e.strip()]


def load_plugins(entries: Sequence[str]) -> int:
    """Import --plugins (relative to the working directory); print each failure, return the exit status."""
    _, failed = plugins.load(entries, base_dir=os.getcwd(), near="the working directory", scoped=False)
    for i, message in failed:
        print(f"<command line>: --plugins {entries[i]}: {message}", file=sys.stderr)
    return EXIT_INVALID if failed else EXIT_OK


def _with_plugins(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def with_plugins(args: argparse.Namespace) -> int:
        status = load_plugins(_plugin_entries(getattr(args, "plugins", None)))
        return status if status != EXIT_OK else run(args)
    return with_plugins


def _run_schema(args: argparse.Namespace) -> int:
    from batchloaders.config import schema  # deferred: imports jsonschema, which validate does not need

    if args.path:  # for tools that take a schema file: $(batchloaders schema --path)/loader_config.schema.json
        print(os.path.abspath(str(schema._schemas_dir())))
        return EXIT_OK
    if args.directory is None:
        print("batchloaders schema: expected DIR (where to write the schema files) or --path", file=sys.stderr)
        return EXIT_USAGE
    builtin_types.load()
    os.makedirs(args.directory, exist_ok=True)
    generated = type_schemas.write(args.directory)
    for name in schema.schema_names():
        path = os.path.join(args.directory, name)
        # The shipped folder itself (schemas/ is reached through a link, so compare real paths) already holds
        # them; the text is read before the file is opened for writing, which would empty it.
        if path not in generated and os.path.realpath(path) != os.path.realpath(
                os.path.join(str(schema._schemas_dir()), name)):
            text = schema.schema_text(name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    print(f"wrote {len(schema.schema_names())} schema files to {args.directory} (point your editor at "
          f"{os.path.join(args.directory, 'loader_config.schema.json')})")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="batchloaders",
                                     description="Validate and inspect batch loader configs and dataset manifests.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show TensorFlow's own start-up and log lines (hidden otherwise)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    # Each subcommand: a parser with set_defaults(run=fn), fn(args) -> exit code.
    # Commands that need TensorFlow import it inside fn, so that validate never loads it.
    plugins_option, trust_option = _plugins_option(), _trust_option()
    reads_config = [plugins_option, trust_option]
    _add_validate(commands, reads_config)
    _add_describe(commands, reads_config)
    _add_bench(commands, reads_config)
    _add_preview(commands, reads_config)
    _add_check_data(commands, reads_config)
    beam = [_beam_options()]
    _add_verify(commands, beam)
    _add_manifest(commands, beam)
    _add_index(commands, beam)
    _add_reshard(commands, beam)
    _add_init(commands)
    _add_serve(commands)
    _add_schema(commands, [plugins_option])
    return parser


def _plugins_option() -> argparse.ArgumentParser:
    """The parent of the commands that take --plugins: they import the plugins that register their types."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--plugins", action="append", metavar="MODULE",
                        help="import MODULE (an import path, or a .py file relative to the working directory) "
                             "before reading configs, so that the steps and secondary feature types it registers "
                             "are known; repeat it or separate modules with commas")
    return parent


def _trust_option() -> argparse.ArgumentParser:
    """The parent of the commands that read a config: whether to run the code its own plugins list names."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--trust-plugins", action="store_true",
                        help="import the .py files a config's own plugins: list names (this runs their code: only "
                             "for configs you trust); without it no config's plugin is imported and the items of "
                             "its plugin types are not checked")
    return parent


def _beam_options() -> argparse.ArgumentParser:
    """The parent of the commands that can read the data on an Apache Beam runner, one element per file."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--runner", metavar="NAME",
                        help="read the data files on this Apache Beam runner, one element per file "
                             "(DirectRunner, DataflowRunner, FlinkRunner, SparkRunner, PortableRunner; needs "
                             "pip install 'batchloaders[beam]'); what is written or printed is the same as without "
                             "it (default: this process reads them, and Beam is not imported)")
    parent.add_argument("--beam-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a Beam pipeline option for --runner, e.g. direct_num_workers=2, project=my-project, "
                             "temp_location=gs://bucket/tmp; repeat it for more")
    return parent


def _runner(args: argparse.Namespace):
    """The Beam runner ``--runner`` and ``--beam-option`` name, None for none."""
    from batchloaders.prepare.beam import runner_from  # deferred: only the data commands need it

    return runner_from(args.runner, args.beam_option)


def _add_validate(commands, parents: list[argparse.ArgumentParser]) -> None:
    check = commands.add_parser(
        "validate", parents=parents, help="check manifests and loader configs",
        description="Check manifests (__manifest__.json, *manifest.json) and loader configs (.yaml, .yml, "
                    ".json). Directories are searched non-recursively. Prints one line per problem and "
                    "'OK PATH' per valid file; exits 1 if any file is invalid.")
    check.add_argument("paths", nargs="+", metavar="PATH", help="a file, or a directory of files")
    check.add_argument("--data", action="store_true",
                       help="then check the first records of the data files of every valid config, as check-data "
                            "does (imports TensorFlow)")
    check.add_argument("--strict-plugins", action="store_true",
                       help="count an item of a plugin type left unchecked (no --trust-plugins) as a problem: "
                            "exit 1 instead of a note")
    check.add_argument("--strict", action="store_true",
                       help="count warnings as problems (exit 1): a config's data files that its manifest's files "
                            "do not list (added after the manifest was written)")
    check.set_defaults(run=_with_plugins(_run_validate))


def _add_describe(commands, parents: list[argparse.ArgumentParser]) -> None:
    show = commands.add_parser(
        "describe", parents=parents, help="show what a loader config compiles to",
        description="Print the loader type, the data files and their record counts, the steps per epoch when "
                    "the manifest fixes them, the reading and shuffling settings, each output tensor's dtype and "
                    "per-example shape, the secondary features and steps, the padding of each tensor, the parsing "
                    "path the config compiles to and the output signature (each batch's tensors, batch axis "
                    "first). Reads no data. Exits 1 if the config is invalid.")
    show.add_argument("config", metavar="CONFIG", help="a loader config (.yaml, .yml, .json)")
    show.add_argument("--json", action="store_true",
                      help="print one JSON object instead (signature, files, records, steps_per_epoch and the rest "
                           "of the plan; null where unknown)")
    show.set_defaults(run=_with_plugins(_run_describe))


def _add_bench(commands, parents: list[argparse.ArgumentParser]) -> None:
    bench = commands.add_parser(
        "bench", parents=parents, help="measure a loader config's throughput",
        description="Run the config's dataset for --batches batches or --seconds seconds, whichever comes "
                    "first (progress on stderr), then print examples/s, batches/s, MB/s read and the padding "
                    "efficiency of each padded tensor; with --stages, where one epoch's time goes instead. "
                    "Exits 1 if the config is invalid or the data fails.")
    bench.add_argument("config", metavar="CONFIG", help="a loader config (.yaml, .yml, .json)")
    bench.add_argument("--batches", type=_positive(int), default=200, metavar="N",
                       help="stop after N batches (default 200)")
    bench.add_argument("--seconds", type=_positive(float), default=20.0, metavar="S",
                       help="stop after S seconds (default 20)")
    bench.add_argument("--stages", action="store_true",
                       help="instead, say where an epoch's time goes: time one epoch through the pipeline cut after "
                            "reading, parsing, secondary features and steps, and the whole of it, in rounds while "
                            "another fits in --seconds (up to 5; --batches does not apply; docs/performance.md)")

    def step_time(text: str) -> float:
        value = _positive(float)(text)
        if not value < float("inf"):  # nan and inf pass _positive
            raise argparse.ArgumentTypeError(f"found {text!r}: expected a positive float")
        return value
    bench.add_argument("--step-ms", type=step_time, metavar="N",
                       help="with --stages (implied): a model step's time in milliseconds; says whether training "
                            "would wait for the input pipeline and what to change first")
    bench.set_defaults(run=_with_plugins(_run_bench))


def _add_preview(commands, parents: list[argparse.ArgumentParser]) -> None:
    preview = commands.add_parser(
        "preview", parents=parents, help="print the first batches a loader config gives",
        description="Read the first N batches exactly as input_fn() yields them (same shuffle and seed) and print "
                    "each tensor's role, dtype, shape and first values, then each padded tensor's padding fraction "
                    "over those batches. Exits 1 if the config is invalid, the data fails, or the dataset gives "
                    "no batch (within --timeout seconds per batch).")
    preview.add_argument("config", metavar="CONFIG", help="a loader config (.yaml, .yml, .json)")
    preview.add_argument("-n", "--batches", type=_positive(int), default=3, metavar="N",
                         help="batches to show (default 3)")
    preview.add_argument("--plot", metavar="FILE.png",
                         help="also draw lengths per example and padding per batch into FILE.png (needs "
                              "matplotlib: pip install \"batchloaders[plot]\")")
    preview.add_argument("--timeout", type=_positive(float), default=60.0, metavar="S",
                         help="give up when a batch takes longer than S seconds (default 60)")
    preview.add_argument("--record", metavar="FILE:N",
                         help="instead of batches, print record N (from 0) of data file FILE (relative to the "
                              "dataset directory, or absolute) decoded as the loader decodes it; a bare number "
                              "counts over the whole dataset; read at its offset when `batchloaders index` wrote "
                              "the file's index")
    preview.set_defaults(run=_with_plugins(_run_preview))


def _add_check_data(commands, parents: list[argparse.ArgumentParser]) -> None:
    data = commands.add_parser(
        "check-data", parents=parents, help="check the first records of every data file against the manifest",
        description="Read the first --records records of every data file of the config's dataset and check "
                    "them against every feature of the manifest: present, stored in the right list type, with "
                    "the number of values (raw: bytes) the shape gives, as context features or feature lists "
                    "as var_len says, Examples or SequenceExamples as allow_var_len says; and each file's "
                    "first bytes: TFRecord, compressed as the manifest says; and that the manifest's files lists "
                    "every data file (when it has files). Prints one line per problem and "
                    "'OK PATH' per good file; exits 1 if any file has problems.")
    data.add_argument("config", metavar="CONFIG", help="a loader config (.yaml, .yml, .json)")
    data.add_argument("--records", type=_positive(int), default=8, metavar="N",
                      help="records to check at the start of each file (default 8)")
    data.set_defaults(run=_with_plugins(_tool("check-data", "check_data",
                                              lambda tool, args: tool.run(args.config, records=args.records,
                                                                          out=sys.stdout,
                                                                          trust_plugins=args.trust_plugins))))


def _add_verify(commands, parents: list[argparse.ArgumentParser]) -> None:
    verify = commands.add_parser(
        "verify", parents=parents, help="re-read every data file whole and check it against the manifest",
        description="Read every data file whole (progress on stderr) and report damaged records, files cut "
                    "inside a record or at a record boundary, cut or unfinished GZIP/ZLIB streams, appended "
                    "bytes, record counts, sizes and SHA-256 that differ from the manifest's files entries, "
                    "records that disagree with the manifest's features, and files the manifest does not list "
                    "or lists but are missing. Imports none of a CONFIG's plugins. Exits 1 if any file has "
                    "problems.")
    verify.add_argument("target", metavar="CONFIG|DIR",
                        help="a loader config, or a dataset directory holding __manifest__.json")
    verify.add_argument("--index-dir", metavar="PATH",
                        help="check the record indexes `batchloaders index --index-dir PATH` wrote there too, each "
                             "data file's against it")
    verify.set_defaults(run=_tool("verify", "verify",
                                  lambda tool, args: tool.run(args.target, out=sys.stdout, err=sys.stderr,
                                                              runner=_runner(args), index_dir=args.index_dir)))


SPLIT_HELP = ("in a data directory TFDS prepared (dataset_info.json and features.json beside NAME-SPLIT.tfrecord-"
              "NNNNN-of-NNNNN shards, whose features are then TFDS's own), the split to read, e.g. train")


def _add_manifest(commands, parents: list[argparse.ArgumentParser]) -> None:
    manifest = commands.add_parser(
        "manifest", parents=parents, help="write or update a dataset directory's __manifest__.json",
        description="Read every data file under DIR whole (progress on stderr) and write DIR/__manifest__.json "
                    "with each file's name, num_records, size_bytes and sha256. Keys an existing manifest holds "
                    "are kept; when it declares no features (or there is none), the features, allow_var_len "
                    "and compression are inferred from the records, a bytes feature whose values all have one "
                    "length is named as a probable raw tensor, and the summary ends with what was guessed. "
                    "Refuses to write when a file is damaged. Exits 2 on a wrong --pattern or --raw, 1 on any "
                    "other problem.")
    manifest.add_argument("directory", metavar="DIR",
                          help="a dataset directory of TFRecord files (named *.tfrecords, *.tfrecord or *.tfrec, "
                               "or shards such as train-00000-of-01024 and mnist-train.tfrecord-00000-of-00002 "
                               "(five digits each), maybe with .gz or .zz after, in DIR or below, unless --pattern "
                               "says otherwise)")
    manifest.add_argument("--pattern", metavar="GLOB",
                          help="the data files, a glob relative to DIR as a dir dataset's args.pattern in a config "
                               "(* and ? within a name, **/ any directories, [abc], {a,b}), e.g. 'train-*'; the "
                               "manifest lists exactly the files it matches; default: the TFRecord and shard names "
                               "above, the glob **/*{.tfrecords,.tfrecord,.tfrec,-NNNNN-of-NNNNN}{,.gz,.zz} with "
                               "each N a digit")
    manifest.add_argument("--raw", action="append", default=[], metavar="NAME=DTYPE[SHAPE]",
                          help="declare the bytes feature NAME a raw tensor of DTYPE and SHAPE (little-endian), "
                               "e.g. image=uint8[28,28] (no [SHAPE]: flat), once the records agree; in an existing "
                               "manifest too; repeat it for more features")
    manifest.add_argument("--split", metavar="NAME", help=SPLIT_HELP + "; the manifest lists only its files")
    manifest.set_defaults(run=_tool("manifest", "write_manifest",
                                    lambda tool, args: tool.run_with(args.directory, tool.Choices(
                                        args.pattern, tuple(args.raw), args.split, _runner(args)), sys.stdout,
                                        sys.stderr)))


def _add_index(commands, parents: list[argparse.ArgumentParser]) -> None:
    index = commands.add_parser(
        "index", parents=parents, help="write the record index of every data file and record it in the manifest",
        description="Walk the frames of every data file (each length's checksum checked; progress on stderr), "
                    "write '<data file>.index' beside it (the byte offset of every record) and record each "
                    "index's name, size and SHA-256 in the manifest's files entries (a file the manifest does "
                    "not list gets its full entry, as the manifest command writes it; a DIR without a manifest "
                    "gets one first). Uncompressed TFRecord files only. Writes nothing when a file is damaged or "
                    "disagrees with the manifest. Imports none of a CONFIG's plugins. Exits 1 on any problem.")
    index.add_argument("target", metavar="DIR|CONFIG",
                       help="a dataset directory (its __manifest__.json written first when there is none), or a "
                            "loader config")
    index.add_argument("--index-dir", metavar="PATH",
                       help="write the indexes and __index_manifest__.json (each index with its data file's size and "
                            "SHA-256) to PATH, a local directory or a URL, and nothing in the dataset's directory "
                            "(which may be read-only); a config reads them with args.dataset.args.index_dir")
    index.set_defaults(run=_tool("index", "write_index",
                                 lambda tool, args: tool.run(args.target, out=sys.stdout, err=sys.stderr,
                                                             runner=_runner(args), index_dir=args.index_dir)))


def _add_reshard(commands, parents: list[argparse.ArgumentParser]) -> None:
    reshard = commands.add_parser(
        "reshard", parents=parents, help="rewrite a dataset into N shards balanced by record count",
        description="Rewrite the records of SRC (a dataset directory whose manifest lists its files, or a loader "
                    "config's dataset) into N files DEST/part-00000-of-0000N.tfrecords whose record counts differ "
                    "by at most one, in SRC's order (shard k holds the records at positions k*T//N to "
                    "(k+1)*T//N - 1 of the T records), with a manifest listing every file's count, size and "
                    "SHA-256 (SRC's features copied) and, unless --no-index, the record index of each: ready for "
                    "shuffle_scope: global. Source files are checked against their manifest entries. The manifest "
                    "is written last, after every shard is complete. Imports none of a CONFIG's plugins. Exits 1 "
                    "on any problem (then no manifest is written).")
    reshard.add_argument("source", metavar="SRC", help="a dataset directory with __manifest__.json, or a loader config")
    reshard.add_argument("destination", metavar="DEST", help="the output directory (new or empty; any file system "
                                                             "TensorFlow writes, e.g. gs://bucket/path)")
    reshard.add_argument("--shards", type=int, required=True, metavar="N", help="the number of output files")
    reshard.add_argument("--compression", choices=("none", "gzip"), default="none",
                         help="the output's compression (default none: only uncompressed files can be indexed)")
    reshard.add_argument("--no-index", dest="index", action="store_false",
                         help="write no record index (uncompressed output is indexed by default)")
    reshard.add_argument("--overwrite", action="store_true",
                         help="replace what DEST holds, once every new shard is written (a failed run keeps it)")
    reshard.add_argument("--leave-out-unlisted", action="store_true",
                         help="when SRC holds data files its manifest does not list, reshard the listed ones (a "
                              "warning names the others; by default they are an error, their records would be lost)")
    reshard.set_defaults(run=_tool("reshard", "reshard", lambda tool, args: tool.run(
        args.source, args.destination, tool.options_from(args), _runner(args), out=sys.stdout, err=sys.stderr)))


def _add_init(commands) -> None:
    init = commands.add_parser(
        "init", help="write a commented loader config for a dataset directory",
        description="Write a loader config for the data in DATA_DIR with every required key filled: the features "
                    "from DATA_DIR/__manifest__.json (written first, as the manifest command writes it, when there "
                    "is none), the read and shuffle buffers from the files' and records' sizes, the windows of a "
                    "sequence loader from the record counts, padding when a tensor varies in length; a comment "
                    "on each key says what it does and why it has that value. Tensors are named as their "
                    "features, with characters a Keras name cannot hold (such as /) made _. The config is checked "
                    "as validate checks it. Exits 1 when the data stops it, 2 for a feature the manifest does not "
                    "declare or a wrong --raw.")
    init.add_argument("directory", metavar="DATA_DIR", help="a dataset directory")
    init.add_argument("--pattern", metavar="GLOB",
                      help="which files below DATA_DIR are data files (default: the usual TFRecord names and "
                           "shard names, as the manifest command finds them)")
    init.add_argument("--loader", choices=kinds.names(), default=kinds.DEFAULT,
                      help=f"the loader type (default {kinds.DEFAULT}: a record is an example)")
    init.add_argument("--inputs", nargs="+", metavar="NAME",
                      help="the features the model takes (default: every feature not a target)")
    init.add_argument("--targets", nargs="+", metavar="NAME",
                      help="the features the model predicts (default: those named label, labels, target, targets "
                           "or y; in SequenceExamples without one, the integer feature lists of one value per step "
                           "beside float feature lists)")
    init.add_argument("--raw", action="append", default=[], metavar="NAME=DTYPE[SHAPE]",
                      help="declare the bytes feature NAME a raw tensor of DTYPE and SHAPE, as the manifest "
                           "command's --raw does (the manifest is written or updated with it first); repeat it for "
                           "more features")
    init.add_argument("--split", metavar="NAME", help=SPLIT_HELP + "; the config's pattern matches its files, and a "
                                                                  "manifest written first lists only them")
    init.add_argument("-o", "--output", metavar="CONFIG", help="write the config to CONFIG (default: print it)")
    init.add_argument("--force", action="store_true", help="replace CONFIG if it exists")
    init.set_defaults(run=_tool("init", "init", lambda tool, args: tool.run(args.directory, tool.Choices(
        pattern=args.pattern, loader=args.loader, inputs=args.inputs, targets=args.targets, output=args.output,
        force=args.force, raws=args.raw, split=args.split), out=sys.stdout, err=sys.stderr)))


def _add_serve(commands) -> None:
    serve = commands.add_parser(
        "serve", help="start a tf.data service dispatcher or worker (for configs with a service block)",
        description="Start TensorFlow's tf.data service DispatchServer (--dispatcher) or a WorkerServer "
                    "registered with the dispatcher at ADDRESS (--worker), print the address to reach it by "
                    "(HOST:PORT) on one line, and serve until interrupted (Ctrl-C or SIGTERM: exit 0). Workers "
                    "run the pipelines trainers register; they read the data files by the configs' paths. "
                    "TensorFlow's servers listen on all network interfaces, whatever --host says, and ask no "
                    "one for credentials: whoever reaches the port can run pipelines, reading and writing files "
                    "as this user. Serve on a trusted network only, or behind a firewall.")
    role = serve.add_mutually_exclusive_group(required=True)
    role.add_argument("--dispatcher", action="store_true", help="start the dispatcher")
    role.add_argument("--worker", metavar="ADDRESS", help="start a worker of the dispatcher at ADDRESS "
                                                          "(HOST:PORT, as --dispatcher printed it)")
    serve.add_argument("--port", type=_port, default=0, metavar="N",
                       help="the port to listen on (default 0: one the system chooses, printed)")
    serve.add_argument("--host", default="localhost", metavar="NAME",
                       help="the name other machines reach this server by, in the printed address and, for a "
                            "worker, in what it tells the dispatcher (default localhost: one machine); it does not "
                            "choose the interface: the server listens on all of them")
    serve.add_argument("--work-dir", metavar="DIR",
                       help="dispatcher: keep a journal in DIR so that a restarted dispatcher recovers its jobs")
    serve.add_argument("--worker-addresses", metavar="HOST:PORT,...",
                       help="dispatcher: the fixed list of its workers (each started with --port and --host to "
                            "match), which processing_mode file, data and file_or_data need")
    serve.set_defaults(run=_run_serve)


def _add_schema(commands, parents: list[argparse.ArgumentParser]) -> None:
    schemas = commands.add_parser(
        "schema", parents=parents, help="write the JSON Schemas, with the types of --plugins, for an editor",
        description="Write every schema file (loader config, manifest, and one per registered step and "
                    "secondary feature type, plugins' included) into DIR, so that an editor validating "
                    "configs against DIR/loader_config.schema.json knows a project's own types. Reads no "
                    "config.")
    schemas.add_argument("directory", metavar="DIR", nargs="?", help="where to write the .schema.json files")
    schemas.add_argument("--path", action="store_true",
                         help="print the directory of the installed schema files (built-in types only) and exit")
    schemas.set_defaults(run=_with_plugins(_run_schema))


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or value <= 0:
            raise argparse.ArgumentTypeError(f"found {text!r}: expected a positive {kind.__name__}")
        return value
    return parse


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"found {text!r}: expected a port from 0 to 65535")
    return int(text)


def _run_serve(args: argparse.Namespace) -> int:
    worker_addresses = [a.strip() for a in (args.worker_addresses or "").split(",") if a.strip()]
    if args.worker is not None and (args.work_dir or worker_addresses):
        print("batchloaders serve: error: --work-dir and --worker-addresses are options of --dispatcher",
              file=sys.stderr)
        return EXIT_USAGE
    for address in ([args.worker] if args.worker is not None else []) + worker_addresses:
        why = address_problem(address)
        if why:
            print(f"batchloaders serve: error: {why}", file=sys.stderr)
            return EXIT_USAGE
    # The dispatcher's worker list holds bare HOST:PORT (workers register without the protocol).
    worker_addresses = [a[len("grpc://"):] if a.startswith("grpc://") else a for a in worker_addresses]
    stop = threading.Event()
    for number in (signal.SIGINT, signal.SIGTERM):  # before TensorFlow's import: a signal during start-up exits 0
        signal.signal(number, lambda *_: stop.set())
    _quiet_tensorflow(args)
    from batchloaders.runtime import service  # deferred: imports TensorFlow

    if stop.is_set():
        return EXIT_OK
    try:
        if args.dispatcher:
            server = service.start_dispatcher(args.port, args.work_dir, worker_addresses)
        else:
            why = service.unreachable(args.worker)
            if why:  # a WorkerServer would wait for its dispatcher silently
                print(f"batchloaders serve: error: {why}: expected a running dispatcher (serve --dispatcher)",
                      file=sys.stderr)
                return EXIT_INVALID
            server = service.start_worker(args.worker, args.port, f"{args.host}:%port%")
    except RuntimeError as error:  # TensorFlow's: e.g. "Could not start gRPC server" (the port is taken)
        print(f"batchloaders serve: error: the server did not start on port {args.port}: {error}".splitlines()[0],
              file=sys.stderr)
        return EXIT_INVALID
    port = service.bound_address(server).rpartition(":")[2]
    print(f"{args.host}:{port}", flush=True)
    # TensorFlow's DispatcherConfig and WorkerConfig take a port but no interface (it binds 0.0.0.0).
    print(f"batchloaders serve: listening on all interfaces, port {port}, without authentication: whoever reaches "
          "it can run pipelines that read and write files as this user", file=sys.stderr, flush=True)
    while not stop.wait(0.5):  # a timed wait: signal handlers run between the waits
        pass
    server.stop()
    return EXIT_OK


def _fail(command: str, error: Exception) -> int:
    for line in str(error).splitlines() or [type(error).__name__]:
        print(f"batchloaders {command}: error: {line}", file=sys.stderr)
    return EXIT_INVALID


def _run_describe(args: argparse.Namespace) -> int:
    from batchloaders.cli import describe  # deferred: imports jsonschema, which validate does not need

    try:
        describe.run(args.config, sys.stdout, as_json=args.json, trust_plugins=args.trust_plugins)
    except BatchLoaderError as error:
        return _fail("describe", error)
    return EXIT_OK


def _run_bench(args: argparse.Namespace) -> int:
    _quiet_tensorflow(args)
    from batchloaders.cli import bench  # deferred: imports TensorFlow

    try:
        if args.stages or args.step_ms is not None:
            from batchloaders.cli import stages  # deferred: imports TensorFlow

            stages.run(args.config, seconds=args.seconds, step_ms=args.step_ms, out=sys.stdout, progress=sys.stderr,
                       trust_plugins=args.trust_plugins)
        else:
            bench.run(args.config, batches=args.batches, seconds=args.seconds, out=sys.stdout, progress=sys.stderr,
                      trust_plugins=args.trust_plugins)
    except bench.FAILURES as error:
        return _fail("bench", error)
    return EXIT_OK


def _run_preview(args: argparse.Namespace) -> int:
    _quiet_tensorflow(args)
    from batchloaders.cli import preview  # deferred: imports TensorFlow

    if args.record is not None:
        return _run_preview_record(args)
    try:
        return preview.run(args.config, args.batches, sys.stdout, plot=args.plot, timeout=args.timeout,
                           trust_plugins=args.trust_plugins)
    except preview.PlotUnavailable as error:
        print(error, file=sys.stderr)
        return EXIT_INVALID
    except preview.NoBatchInTime as error:
        # The thread waiting for a batch may be stuck inside TensorFlow, which would keep the process alive.
        _fail("preview", error)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_INVALID)
    except preview.FAILURES as error:
        return _fail("preview", error)


def _run_preview_record(args: argparse.Namespace) -> int:
    from batchloaders.cli import preview_record  # deferred: imports TensorFlow

    try:
        return preview_record.run(args.config, args.record, sys.stdout, trust_plugins=args.trust_plugins)
    except preview_record.Usage as error:
        _fail("preview", error)
        return EXIT_USAGE
    except (BatchLoaderError, tf_errors().OpError) as error:
        return _fail("preview", error)


def tf_errors():
    """tf.errors, once a command has imported TensorFlow."""
    import tensorflow as tf  # deferred: only commands that read data import TensorFlow

    return tf.errors


def _quiet_tensorflow(args: argparse.Namespace | None = None) -> None:
    """Import TensorFlow without its native start-up lines (runtime/quiet.py), unless -v."""
    import_tensorflow(verbose=bool(getattr(args, "verbose", False)))


def _tool(command: str, module: str, call: Callable) -> Callable[[argparse.Namespace], int]:
    """The run function of a command of this package: ``call(module, args)`` -> exit status.

    The module (and TensorFlow with it) is imported only when the command runs.
    """
    def run(args: argparse.Namespace) -> int:
        _quiet_tensorflow(args)
        tool = importlib.import_module(f"batchloaders.cli.{module}")
        try:
            return call(tool, args)
        except BatchLoaderError as error:
            return _fail(command, error)
    return run


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: parse ``argv`` and exit with the command's status."""
    args = build_parser().parse_args(argv)  # exits 2 on a usage error
    if args.verbose:  # TensorFlow as it is, even where importing the package made it quiet by default
        uninstall()
    else:  # whichever command ends up importing TensorFlow does it quietly
        install()
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        status = run(args)
        sys.stdout.flush()  # inside the try: a pipe closed meanwhile fails here, not at interpreter exit
    except BrokenPipeError:
        # The reader went away (`| head -1`): nothing more can be shown. Point stdout at devnull so that
        # the interpreter's own flush at exit does not fail again with a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = EXIT_BROKEN_PIPE
    sys.exit(status)
