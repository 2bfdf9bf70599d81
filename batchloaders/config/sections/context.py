"""What the sections of the config check share: the document, where problems go, what came before.

A section reads the args through :meth:`SectionContext.value` and :meth:`SectionContext.items`, which
skip what broke the schema (that is reported already), and leaves what it made here for the next.
"""
from __future__ import annotations

from batchloaders.errors import BatchLoaderError, ConfigError, ManifestError, Problem, json_path, suggest
from batchloaders.transform.registry import CheckContext
from batchloaders.config.document import Document
from batchloaders.config.stage_rules import blocks
from batchloaders.core.model import PrimaryFeature, SecondaryFeature, Step, TensorInfo


class Checker:
    """Collects problems; knows which paths broke the schema so semantic checks skip them."""

    def __init__(self, doc: Document, problems: list[Problem], invalid: set[tuple]):
        self.doc = doc
        self.problems: list[Problem] = list(problems)
        self.invalid = invalid

    def __call__(self, parts: tuple, message: str) -> None:
        self.problems.append(self.doc.problem(tuple(parts), message))

    def at(self, prefix: tuple):
        return lambda parts, message: self(prefix + tuple(parts), message)

    def error(self) -> BatchLoaderError:
        """All problems in one error: a ManifestError when only the manifest is wrong."""
        if all(p.file != self.doc.source for p in self.problems):
            return ManifestError(self.problems)
        return ConfigError(self.problems)

    def valid(self, parts: tuple) -> bool:
        """True when nothing at, above or below ``parts`` broke the schema."""
        remap = getattr(self.doc, "remap", None)  # (a mixture's first source stands in for the dataset)
        parts = remap(parts) if remap is not None else tuple(parts)
        n = len(parts)
        return not any(bad[:n] == parts or parts[:len(bad)] == bad for bad in self.invalid)


class SectionContext:
    """The state of one config check, filled in section by section (see config.config_from_document).

    ``unchecked``: path of an item of a plugin type not imported -> its notice; ``model_names``: the
    (inputs, targets) given in code, which replace the config's model block.
    """

    def __init__(self, doc: Document, check: Checker, *, scopes: frozenset, unchecked: dict[tuple, Problem],
                 model_names=None):
        self.doc, self.check, self.valid = doc, check, check.valid
        self.data, self.args, self.loader_type = doc.data, doc.data["args"], doc.data["type"]
        self.scopes, self.unchecked, self.model_names = scopes, unchecked, model_names
        self.dataset = self.manifest = None
        # The model section: what the model takes, and whether the names are known at all.
        self.inputs: tuple[str, ...] = ()
        self.targets: tuple[str, ...] = ()
        self.model_known, self.model_assumed = True, False
        self.wanted: set[str] = set()
        # Names and tensors as the sections so far left them.
        self.seen: dict[str, tuple] = {}  # to_name -> path of the to_name that defines it
        self.tensors: dict[str, TensorInfo] = {}
        self.primaries: dict = {}  # to_name -> the manifest feature of each primary feature
        self.unnamed: list[str] = []  # lists with broken entries whose to_name is unknown: any tensor may be theirs
        # Tensors a regroup stage reads for itself, which the model need not use (segmenting's key).
        self.unfed = {name for stage in blocks() if self.valid(("args", stage.name))
                      and isinstance(self.args.get(stage.name), dict) for name in stage.unfed(self.args[stage.name])}
        # What the sections make, for LoaderConfig.
        self.primary: list[PrimaryFeature] = []
        self.secondary: list[SecondaryFeature] = []
        self.deferred: dict[str, tuple] = {}  # to_name -> (index in secondary, at, kind, args): built after steps
        self.steps: list[Step] = []
        self.padding, self.pad_specs = False, {}
        self.regroup: dict[str, object] = {}  # block name (bucketing, packing ...) -> its checked spec or None
        self.service = None
        self.sources: list = []  # a mixture's sources, checked (sections/sources.py)
        self.mixing = None

    @property
    def model_declared(self) -> bool:
        """The model's names come from a model block or from code (not assumed from the features)."""
        return self.model_names is not None or "model" in self.data

    @property
    def model_tensors(self) -> tuple[str, ...]:
        return self.inputs + self.targets

    @property
    def outputs(self) -> set[str]:
        """The tensors a batch holds: the model's, or every feature when the model names none."""
        return self.wanted or set(self.seen)

    def value(self, *parts, default=None):
        """args[parts...] when present and schema-valid, else ``default``."""
        node = self.args
        for part in parts:
            if not self.valid(("args",) + parts) or not isinstance(node, (dict, list)):
                return default
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                return default
        return node

    def items(self, key: str) -> list[tuple[int, dict]]:
        """(index, item) of each schema-valid entry of the list args[key]."""
        entries = self.args.get(key, ())
        if not isinstance(entries, list):
            return []
        return [(i, e) for i, e in enumerate(entries) if self.valid(("args", key, i))]

    def given(self, key: str) -> bool:
        """args has the block ``key`` and it passed the schema."""
        return key in self.args and self.valid(("args", key))

    def type_context(self, at: tuple) -> CheckContext:
        """What a registered type's ``infer`` sees of this config, reporting under ``at``."""
        return CheckContext(self.loader_type, self.tensors, self.primaries, self.check.at(at), self.doc.base_dir)

    def claim(self, to_name: str, at: tuple) -> None:
        """``to_name`` is made at ``at``: it must be new, and the model must use it."""
        if to_name in self.seen:
            self.check(at + ("to_name",), f"duplicate to_name {to_name!r} (first defined at "
                                          f"{json_path(self.seen[to_name])}): every to_name must be unique")
        else:
            self.seen[to_name] = at + ("to_name",)
        if (self.model_known and (self.wanted or self.model_declared) and to_name not in self.wanted
                and to_name not in self.unfed):
            self.check(at + ("to_name",), f"to_name {to_name!r} is constructed but not used by the model: expected "
                                          f"one of the model's inputs or targets ({', '.join(sorted(self.wanted))})"
                                          f"{suggest(to_name, self.wanted)}")

    def claim_broken(self, key: str) -> None:
        """Entries that broke the schema still define their to_name: later checks stay quiet about it."""
        entries = self.args.get(key, [])
        if not isinstance(entries, list) or (not self.valid(("args", key)) and not entries):
            self.unnamed.append(key)
        for i, entry in enumerate(entries if isinstance(entries, list) else ()):
            name = entry.get("to_name") if isinstance(entry, dict) else None
            if self.valid(("args", key, i)):
                continue
            if isinstance(name, str) and self.valid(("args", key, i, "to_name")):
                self.seen.setdefault(name, ("args", key, i, "to_name"))
            else:
                self.unnamed.append(key)
