"""Importing the plugin modules a config (``plugins:``) or the command line (``--plugins``) names.

A plugin is imported only when named, never found by scanning. An entry ending in
``.py`` is a file, relative to the config's directory (the working directory on the
command line); anything else is a module import path, looked up on ``sys.path`` and
then in that same directory. Importing registers its types (see :mod:`batchloaders.extend`);
a module already imported is not imported again. Any failure is a ConfigError naming
the entry: the module is missing, raises on import, or registers a bad or taken name.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import traceback

from batchloaders.errors import BatchLoaderError


def load(entries, *, base_dir: str, near: str = "the config's directory") -> list[tuple[int, str]]:
    """Import every entry; (index, why) of each that failed (a refused registration, or any error)."""
    problems = []
    for i, entry in enumerate(entries):
        try:
            _import(entry, base_dir)
        except BatchLoaderError as error:  # a registration refused: say which plugin made it, and where
            problems.extend((i, f"plugin {entry!r}: {p}") for p in error.problems)
        except (Exception, SystemExit) as error:  # noqa: BLE001  (anything a user's module raises on import)
            problems.append((i, _why(entry, error, near)))
    return problems


def _import(entry: str, base_dir: str):
    if entry.endswith(".py"):
        path = os.path.normpath(os.path.join(base_dir, entry))
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no file {path}")
        name = "batchloaders_plugin_" + hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:12]
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]  # a second attempt after a fix must run it again
            raise
        return module
    try:
        return importlib.import_module(entry)
    except ModuleNotFoundError as error:
        # Only when the module itself is missing (not something it imports): try the config's folder.
        top = entry.split(".")[0]
        beside = os.path.isfile(os.path.join(base_dir, top + ".py")) or os.path.isdir(os.path.join(base_dir, top))
        if error.name != top or not beside:
            raise
    sys.path.insert(0, os.path.abspath(base_dir))
    try:
        return importlib.import_module(entry)
    finally:
        sys.path.remove(os.path.abspath(base_dir))


def _why(entry: str, error: BaseException, near: str) -> str:
    if isinstance(error, ModuleNotFoundError) and error.name and entry.split(".")[0] == error.name.split(".")[0] \
            and not entry.endswith(".py"):
        return (f"plugin module {entry!r} cannot be imported: no module named {error.name!r} on the Python path or "
                f"in {near}; expected an importable module name or a path to a .py file")
    if isinstance(error, FileNotFoundError) and entry.endswith(".py"):
        return f"plugin file {entry!r} does not exist ({error}); expected a .py file relative to {near}"
    # Where in the plugin it failed: the last frame of the traceback inside the user's code.
    frames = traceback.extract_tb(error.__traceback__)
    at = f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""
    return f"plugin {entry!r} failed to import: {type(error).__name__}: {error}{at}"
