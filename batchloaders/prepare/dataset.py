"""The dataset a data command's DIR or CONFIG argument names: its manifest and data files.

A config's plugins are not imported: reading the data needs none of their types.
"""
from __future__ import annotations

from batchloaders.errors import BatchLoaderError, ConfigError, PluginsNotChecked, Problem
from batchloaders.config import datasets
from batchloaders.config.config import load_config
from batchloaders.config.datasets import DEFAULT_PATTERN, pattern_matcher
from batchloaders.config.document import load_file
from batchloaders.config.manifest import MANIFEST_NAME
from batchloaders.config.schema import schema_check
from batchloaders.core.model import Dataset, Manifest
from batchloaders.prepare import paths
from batchloaders.read.records import shown


def load_dataset(path: str, *, trust_plugins: bool = False) -> Dataset:
    """The dataset (manifest and data files) of the loader config at ``path``; raise its problems.

    A config whose only problems are the data disagreeing with the manifest's
    ``files`` (a listed file's size changed) still gives its dataset: reading
    the data is how those problems are looked into. ``trust_plugins``: import the config's own plugins
    (runs their code); reading the data needs none of their types, so only a user's explicit
    ``--trust-plugins`` passes True.
    """
    if not paths.found(path):  # said as such, not as a file type a config cannot have
        raise ConfigError(Problem(path, "$", f"not found: expected a dataset directory (holding {MANIFEST_NAME}) "
                                             "or a loader config (.yaml, .yml, .json)"))
    try:
        return load_config(path, trust_plugins=trust_plugins).dataset
    except PluginsNotChecked:  # valid but for its plugin types, which reading the data does not need
        return _dataset_only(path)
    except BatchLoaderError as error:
        dataset = _dataset_only(path)
        if dataset is None or not all(_data_tools_may_fix(problem, dataset) for problem in error.problems):
            raise
        return dataset


# Where a config says its data lacks a record index (a global shuffle's check): `batchloaders index CONFIG`
# writes what is missing, so the data tools read the dataset of such a config.
_INDEX_PATHS = ("$.args.shuffle_scope", "$.args.dataset.args.index_dir")


def _data_tools_may_fix(problem, dataset: Dataset) -> bool:
    """Whether ``problem`` is one the data tools look into or write away: the data disagreeing with the
    manifest, or a missing or stale record index."""
    return problem.file == dataset.manifest.path or problem.path in _INDEX_PATHS


def _dataset_only(path: str) -> Dataset | None:
    """The config's dataset specifier resolved alone, or None when that part of the config is invalid."""
    try:
        doc = load_file(path, ConfigError)
        _, invalid = schema_check(doc, "loader_config.schema.json")
        where = ("args", "dataset")
        if any(bad[:len(where)] == where[:len(bad)] for bad in invalid):
            return None
        return datasets.resolve(doc.data["args"]["dataset"], doc)
    except BatchLoaderError:
        return None


def unlisted(path: str, manifest: Manifest) -> list[str]:
    """The problem of a data file that the manifest's ``files`` does not list (its records would be read
    uncounted), as a list of one line; empty when it is listed or the manifest has no ``files``."""
    if not manifest.files or manifest.entry(path) is not None:
        return []
    return [f"not listed in the files of the manifest {shown(manifest.path)}: it was added after the manifest was "
            "written (run `batchloaders manifest` on the dataset directory)"]


def target_files(target: str) -> tuple[Manifest, list[str], list[Problem]]:
    """The manifest and data files a DIR or CONFIG argument names, and the paths under DIR that cannot be read.

    Args:
        target: a dataset directory (its manifest, the data files a ``dir`` dataset finds there) or a config.

    Returns:
        ``(manifest, data files, unreadable)``: each path under DIR that cannot be read as a Problem of DIR's
        (path ``file``).

    Raises:
        BatchLoaderError: the manifest or config is invalid, or ``target`` is not there (ConfigError).
    """
    if paths.isdir(target):
        manifest = paths.load_manifest(paths.join(target, MANIFEST_NAME))
        files, unreadable = paths.walk(target, pattern_matcher(DEFAULT_PATTERN))
        return manifest, files, [Problem(shown(target), "file", problem) for problem in unreadable]
    dataset = load_dataset(target)  # its plugins are not imported: reading the data needs none of their types
    return dataset.manifest, list(dataset.files), []
