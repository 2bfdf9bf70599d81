"""Importing the plugin modules a config (``plugins:``) or the command line (``--plugins``) names.

A plugin is imported only when named, never found by scanning. A config's entry is a ``.py``
file inside the config's directory tree (:func:`entry_problem`): a config is data, and a
config under review must not choose which installed module or outside file runs. On the
command line (the user's own choice) an entry ending in ``.py`` is a file relative to the
working directory; anything else is a module import path, looked up on ``sys.path`` and
then, for a top-level name, as ``NAME.py`` or package ``NAME/`` in that same directory.

One file is imported once per process, whatever it is called (a path, or a module
name that finds the same file), so its types are never registered twice. The types a
config's own ``plugins:`` import register under that file's path (its scope, see
``registry.BUILTIN``): only configs naming the file see them, so whether a config is
valid never depends on which configs were checked before it. ``--plugins`` imports
are seen by every config of the run, also when a config's own list imported the file first
in the same process. Any failure is reported per entry: the module is missing, raises on
import, or registers a bad or taken name. Loading is serialised by one lock, so that threads
building configs that name the same file import it once and all see its types.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import threading
import traceback

from batchloaders.errors import BatchLoaderError
from batchloaders.transform.extend import registering
from batchloaders.transform.registry import BATCHERS, GLOBAL, SECONDARY, STEPS

_BY_PATH: dict[str, object] = {}  # resolved file -> module imported from it
# Held while importing: a second thread must find the file imported, not half-run. Reentrant: a
# plugin may itself build a config naming another plugin while it is imported.
_LOCK = threading.RLock()


def entry_problem(entry: str, base_dir: str) -> str | None:
    """Why a config's ``plugins`` entry may not be imported from that config (None when it may);
    checked without running anything, whether or not the plugins are then imported."""
    if not entry.endswith(".py"):
        return (f"found {entry!r}: expected a .py file path relative to the config's directory (a config "
                "imports no module by name; import a module with --plugins or in your own program)")
    if "\0" in entry:  # no file system takes it (os.path raises ValueError)
        return (f"found {entry!r}, which holds a NUL character, so it is no file's path: expected a .py file path "
                "relative to the config's directory")
    base = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(base, entry))
    if os.path.commonpath([base, path]) != base:  # (a symbolic link is judged by where it leads)
        return (f"found {entry!r}, which is {path}, outside the config's directory {base}: expected a .py file "
                "inside the config's directory tree (import a plugin kept elsewhere with --plugins or in your "
                "own program)")
    if not os.path.isfile(path):
        return f"plugin file {entry!r} does not exist (no file {path}); expected a .py file relative to the config's directory"
    return None


def load(entries, *, base_dir: str, near: str = "the config's directory", scoped: bool = True
         ) -> tuple[list[str], list[tuple[int, str]]]:
    """Import every entry: (the scope of each imported entry, (index, why) of each that failed).

    ``scoped``: register the types of newly imported files under their path (a config's list)
    rather than for every config (the command line).
    """
    with _LOCK:
        return _load(entries, base_dir, near, scoped)


def _load(entries, base_dir: str, near: str, scoped: bool) -> tuple[list[str], list[tuple[int, str]]]:
    scopes, problems = [], []
    for i, entry in enumerate(entries):
        try:
            scope = _import(entry, base_dir, scoped)
            if not scoped:  # imported before for one config's own list: now every config sees its types
                for registry in (SECONDARY, STEPS, BATCHERS):
                    registry.rescope(scope, GLOBAL)
            scopes.append(scope)
        except BatchLoaderError as error:  # a registration refused: say which plugin made it, and where
            problems.extend((i, f"plugin {entry!r}: {p}") for p in error.problems)
        except (Exception, SystemExit) as error:  # noqa: BLE001  (anything a user's module raises on import)
            problems.append((i, _why(entry, error, near)))
    return scopes, problems


def _import(entry: str, base_dir: str, scoped: bool) -> str:
    """Import ``entry`` (once per file); returns its scope, the resolved path of its file."""
    if entry.endswith(".py"):
        if "\0" in entry:  # no file system takes it (os.path.realpath raises ValueError)
            raise FileNotFoundError("it holds a NUL character, so it is no file's path")
        path = os.path.realpath(os.path.join(base_dir, entry))
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no file {path}")
        return _from_file(path, scoped)
    try:
        spec = importlib.util.find_spec(entry)
    except ModuleNotFoundError:  # a parent package is missing
        spec = None
    if spec is None:
        # Not importable: a top-level name may be a module or package next to the config.
        for candidate in (os.path.join(base_dir, entry + ".py"), os.path.join(base_dir, entry, "__init__.py")):
            if "." not in entry and os.path.isfile(candidate):
                return _from_file(os.path.realpath(candidate), scoped, name=entry)
        raise ModuleNotFoundError(f"No module named {entry!r}", name=entry)
    path = os.path.realpath(spec.origin) if spec.origin and os.path.isfile(spec.origin) else entry
    if path in _BY_PATH or entry in sys.modules:
        _BY_PATH.setdefault(path, sys.modules.get(entry))
        return path
    with registering(path if scoped else GLOBAL):
        _BY_PATH[path] = importlib.import_module(entry)
    return path


def _from_file(path: str, scoped: bool, name: str | None = None) -> str:
    if path in _BY_PATH:
        return path
    for module in list(sys.modules.values()):  # imported by name before (a program, or --plugins)
        if os.path.realpath(getattr(module, "__file__", None) or "") == path:
            _BY_PATH[path] = module
            return path
    # A private module name: the file's stem could shadow (or be shadowed by) an installed module.
    unique = "batchloaders_plugin_" + hashlib.sha1(path.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(unique, path, submodule_search_locations=(
        [os.path.dirname(path)] if os.path.basename(path) == "__init__.py" else None))
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique] = module
    try:
        with registering(path if scoped else GLOBAL):
            spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[unique]  # a second attempt after a fix must run it again
        raise
    _BY_PATH[path] = module
    return path


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
