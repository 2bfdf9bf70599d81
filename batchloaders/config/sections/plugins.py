"""The config's ``plugins`` list: checked, imported (when trusted), or set aside (when not)."""
from __future__ import annotations

from batchloaders.errors import ConfigError, Problem, json_path
from batchloaders.transform import plugins
from batchloaders.transform.registry import BATCHERS, POLICIES, SECONDARY, STEPS
from batchloaders.config.document import Document


def plugin_entries(doc: Document) -> list[tuple[int, str]]:
    """(index, entry) of the config's ``plugins`` list, each a .py file inside the config's directory
    tree (else a ConfigError at the entry); checked without importing anything."""
    entries = doc.data.get("plugins") if isinstance(doc.data, dict) else None
    if not isinstance(entries, list):
        return []  # absent, or reported by the schema check
    named = [(i, e) for i, e in enumerate(entries) if isinstance(e, str) and e]
    problems = [doc.problem(("plugins", i), why) for i, e in named if (why := plugins.entry_problem(e, doc.base_dir))]
    if problems:
        raise ConfigError(problems)
    return named


def load_plugins(doc: Document, named: list[tuple[int, str]]) -> frozenset:
    """Import the modules the config's ``plugins`` list names, before anything looks a type up;
    returns their scopes (the types registered by them are visible to this config)."""
    scopes, problems = plugins.load([e for _, e in named], base_dir=doc.base_dir)
    if problems:
        raise ConfigError([doc.problem(("plugins", named[i][0]), message) for i, message in problems])
    return frozenset(scopes)


# Where a config names a registered type: (list under args, key naming the type) -> its registry.
_TYPE_KEYS = {("processing_steps", "type"): STEPS, ("secondary_features", "type"): SECONDARY,
              ("padding", "batching"): BATCHERS}


def set_aside(doc: Document, problems: list[Problem], invalid: set, scopes, files: list[str]
              ) -> tuple[list[Problem], dict[tuple, Problem]]:
    """The schema's problems without "unknown type" for the types no imported registry has (a plugin's,
    as the config lists plugins), and a notice per such item. Its path stays invalid: the checks that
    need what the item makes skip it, the rest run."""
    origin = files[0] if len(files) == 1 else "one of " + ", ".join(files)
    unchecked = {}
    for parts in invalid:
        if len(parts) != 4 or parts[0] != "args" or (parts[1], parts[3]) not in _TYPE_KEYS:
            continue
        registry = _TYPE_KEYS[parts[1], parts[3]]
        name = _at(doc.data, parts)
        if isinstance(name, str) and registry.get(name, scopes) is None and name not in POLICIES:
            unchecked[parts] = doc.problem(parts, f"not checked: plugin type {name!r} from {origin} (pass "
                                                  "--trust-plugins to import it)")
    kept = [p for p in problems if p.path not in {json_path(parts) for parts in unchecked}]
    return kept, unchecked


def _at(data, parts: tuple):
    for part in parts:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data
