"""``args.sources`` and ``args.mixing``: several datasets mixed into one stream (loaders/mixture.py).

The first source is checked as a config's one dataset is (every section sees its dataset and primary
features through :class:`FirstSource`, a view of the document whose problems point back into
``args.sources[0]``); each other source is then checked here against it: its dataset, its features in
its own manifest, and the tensors it gives, which must be the first source's by name, dtype and shape.
"""
from __future__ import annotations

import dataclasses

from batchloaders.config import datasets
from batchloaders.config.accounting import examples_bounded, record_counts
from batchloaders.config.document import Document
from batchloaders.config.sections.context import SectionContext
from batchloaders.config.stage_rules import blocks, flagged
from batchloaders.config.sections.loader import fixed_window, primary_info
from batchloaders.config.sections.primary import manifest_feature
from batchloaders.errors import BatchLoaderError, json_path, suggest
from batchloaders.core.model import Mixing, PrimaryFeature, Source, format_shape

_MOVED = ("dataset", "primary_features")  # what the first source stands in for


@dataclasses.dataclass(frozen=True)
class Moved(Document):
    """``base`` with problems at ``args.<dataset|primary_features>...`` reported at ``prefix`` + the same."""

    prefix: tuple = ()

    def remap(self, path: tuple) -> tuple:
        path = tuple(path)
        if len(path) >= 2 and path[0] == "args" and path[1] in _MOVED:
            return self.prefix + path[1:]
        return path

    def position_of(self, path: tuple):
        return super().position_of(self.remap(path))

    def problem(self, path: tuple, message: str):
        return super().problem(self.remap(path), message)


def _moved(doc: Document, data, index: int) -> Moved:
    return Moved(data, doc.source, doc.base_dir, doc.positions, prefix=("args", "sources", index))


def first_source_view(doc: Document) -> Document:
    """``doc`` as the sections check it: with ``args.sources``, its first source's dataset and primary features
    stand where a single dataset's are (problems found there point back into the source)."""
    args = doc.data.get("args") if isinstance(doc.data, dict) else None
    entries = args.get("sources") if isinstance(args, dict) else None
    if not isinstance(entries, list) or not entries or not isinstance(entries[0], dict):
        return doc
    if any(key in args for key in _MOVED):  # both: reported by check_sources, the dataset checked as given
        return doc
    first = entries[0]
    view_args = {**args, **{key: first[key] for key in _MOVED if key in first}}
    return _moved(doc, {**doc.data, "args": view_args}, 0)


def check_sources(ctx: SectionContext, doc: Document) -> None:
    """The sources after the first, the weights and the mixing block (``doc``: the document as written)."""
    args = doc.data["args"]
    if "mixing" in args and "sources" not in args:
        ctx.check(("args", "mixing"), "found mixing without sources: it says how sources are mixed; expected "
                                      "sources (or no mixing block)")
    if "sources" not in args or not ctx.valid(("args", "sources")):
        return
    if any(key in args for key in _MOVED):
        given = " and ".join(key for key in _MOVED if key in args)
        ctx.check(("args", "sources"), f"found sources and {given}: a config reads one dataset (dataset and "
                                       "primary_features) or several (sources, each with its own); expected one "
                                       "of them")
        return
    why_not = {"service": _NO_SERVICE, **{stage.name: stage.unmixable for stage in flagged("unmixable")}}
    for unsupported, why in why_not.items():
        if ctx.given(unsupported):
            ctx.check(("args", "sources"), f"found sources with {unsupported}: "
                                           f"{why}; expected one dataset, or no {unsupported}")
    if ctx.value("shuffle_scope", default="buffer") == "global":
        ctx.check(("args", "shuffle_scope"), "found global with sources: a global shuffle permutes one dataset's "
                                             "records; expected shuffle_scope buffer with sources")
    entries = args["sources"]
    names = [e.get("name", f"source_{i}") for i, e in enumerate(entries)]
    for i, name in enumerate(names):
        if name in names[:i]:
            ctx.check(("args", "sources", i, "name"), f"duplicate source name {name!r} (also source {names.index(name)}):"
                                                      " expected every source's name to be unique")
    ctx.sources = [_first(ctx, names[0])] if ctx.dataset is not None else []
    for i in range(1, len(entries)):
        found = _other(ctx, doc, i, names[i], names[0])
        if found is not None and ctx.sources:
            ctx.sources.append(found)
    if len(ctx.sources) == len(entries):
        ctx.sources = _weighted(ctx, entries, ctx.sources)
    given = args.get("mixing") if ctx.valid(("args", "mixing")) and isinstance(args.get("mixing"), dict) else {}
    # (an unknown key is reported by the schema check and does not mark the block invalid)
    ctx.mixing = Mixing(**{f.name: given[f.name] for f in dataclasses.fields(Mixing) if f.name in given})
    if all("weight" in e for e in entries) and len(ctx.sources) == len(entries):
        _check_unbounded_weights(ctx)
    if ctx.mixing.batches == "stratified":
        _check_stratified(ctx)
    if ctx.mixing.exhausted == "repeat" and ctx.value("epochs") is not None and ctx.sources:
        unknown = [s.name for s in ctx.sources if record_counts(s.dataset.manifest, s.dataset.files) is None]
        if unknown:
            ctx.check(("args", "mixing", "exhausted"), (
                f"found repeat, but the manifest(s) of {', '.join(map(repr, unknown))} list no record counts: repeat "
                "ends the run when the source that lasts longest at its weight runs out, which the counts tell; "
                "expected counts in every manifest (`batchloaders manifest DIR`), or exhausted continue or stop"))


def _check_stratified(ctx: SectionContext) -> None:
    """``batches: stratified`` forms every batch from its sources' shares: it needs plain batching, and an end
    of the run the shares decide (a source that runs out cannot go on filling its share)."""
    for stage in blocks():
        if ctx.given(stage.name) and not stage.unmixable:  # (an unmixable stage is refused with any mixture)
            ctx.check(("args", "mixing", "batches"), (
                f"found stratified with {stage.name} ($.args.{stage.name}): stratified makes every batch of its "
                f"sources' shares, and {stage.name} {stage.regroups} from the examples as they come, which would "
                f"undo the shares; expected batches mixed or per_source with {stage.name}, or no {stage.name}"))
    if ctx.mixing.exhausted == "continue" and ctx.value("epochs") is not None:
        ctx.check(("args", "mixing", "exhausted"), (
            "found continue (the default) with batches stratified and finite epochs: continue reads every record "
            "of every source, so once a source has run out the batches could no longer hold its share, and "
            "their composition would then follow the sources' sizes, not the weights; expected stop (the run "
            "ends at the first batch a source cannot fill its share of) or repeat (the sources that run out "
            "start again until the one that lasts longest at its weight ends), or epochs null"))


# Under exhausted: continue, a source whose examples nothing bounds (loaders/mixture.py: budgets) is found
# spent only by drawing it: a source left running at a weight this many times smaller costs that many draws
# per example.
MAX_WEIGHT_RATIO = 1000


def _check_unbounded_weights(ctx: SectionContext) -> None:
    """Given weights, with exhausted continue and finite epochs: a source must weigh at least 1/MAX_WEIGHT_RATIO
    of every other source whose examples neither the manifest's counts nor its files' sizes bound."""
    if ctx.mixing.exhausted != "continue" or ctx.value("epochs") is None:
        return
    unbounded = [s for s in ctx.sources
                 if not examples_bounded(s.dataset, ctx.loader_type, [p.from_name for p in s.primary_features])]
    for source in ctx.sources:
        others = [u for u in unbounded if u is not source]
        heaviest = max(others, key=lambda u: u.weight, default=None)
        if heaviest is None or source.weight * MAX_WEIGHT_RATIO >= heaviest.weight:
            continue
        ctx.check(("args", "sources", source.index, "weight"), (
            f"found {source.weight:g} for source {source.name!r}, less than 1/{MAX_WEIGHT_RATIO:,} of the weight of "
            f"source {heaviest.name!r} ({heaviest.weight:g}), whose examples nothing counts (its manifest lists no "
            "counts for its compressed or remote files, or its windows are cut from feature lists): with exhausted "
            "continue, once that source has run out it would still be drawn, about "
            f"{heaviest.weight / source.weight:,.0f} times for each example of this one; expected a weight of at "
            f"least {heaviest.weight / MAX_WEIGHT_RATIO:g}, record counts in that manifest (`batchloaders manifest "
            "DIR`), or exhausted stop or repeat"))


# Why sources cannot have a service block (a regroup stage says why it cannot: its ``unmixable``).
_NO_SERVICE = "the sources would each need a service job of their own, which this version does not build"


def _first(ctx: SectionContext, name: str) -> Source:
    # Its primary features were made where a single dataset's stand: their paths are moved into the source.
    moved = "$.args.sources[0].primary_features"
    ctx.primary[:] = [dataclasses.replace(p, json_path=p.json_path.replace("$.args.primary_features", moved, 1))
                      for p in ctx.primary]
    return Source(name, 0, dataclasses.replace(ctx.dataset, json_path="$.args.sources[0].dataset"),
                  tuple(ctx.primary), 0.0, "$.args.sources[0]")


def _other(ctx: SectionContext, doc: Document, i: int, name: str, first_name: str) -> Source | None:
    """Source ``i`` checked: its dataset resolved, its features found, its tensors the first source's."""
    at = ("args", "sources", i)
    if not ctx.valid(at):
        return None
    entry = doc.data["args"]["sources"][i]
    try:
        dataset = datasets.resolve(entry["dataset"], _moved(doc, doc.data, i))
    except BatchLoaderError as error:
        ctx.check.problems.extend(error.problems)
        return None
    dataset = dataclasses.replace(dataset, json_path=json_path(at + ("dataset",)))
    manifest = dataset.manifest
    window = fixed_window(ctx.loader_type, ctx.value("min_window"), ctx.value("max_window"))
    first_primary = {p.to_name for p in ctx.primary}
    primary, seen = [], set()
    for j, p in enumerate(entry["primary_features"]):
        where = at + ("primary_features", j)
        primary.append(PrimaryFeature(p["from_name"], p["to_name"], json_path(where)))
        seen.add(p["to_name"])
        feature = manifest_feature(ctx, manifest, p["from_name"], where)
        if feature is None:
            continue
        if p["to_name"] not in first_primary:
            ctx.check(where + ("to_name",), f"source {name!r} gives tensor {p['to_name']!r}, which source "
                                            f"{first_name!r} does not: expected every source to give the same "
                                            f"tensors ({', '.join(sorted(first_primary))})"
                                            f"{suggest(p['to_name'], first_primary)}")
            continue
        info = primary_info(feature, ctx.loader_type, allow_var_len=manifest.allow_var_len, window=window,
                            report=ctx.check.at(where))
        expected = ctx.tensors.get(p["to_name"])
        if expected is not None and info != expected:
            ctx.check(where + ("from_name",), (
                f"source {name!r} gives tensor {p['to_name']!r} as {info.dtype} {format_shape(info.shape)} (feature "
                f"{p['from_name']!r} of {manifest.path}), source {first_name!r} as {expected.dtype} "
                f"{format_shape(expected.shape)}: expected every source to give each tensor with one dtype and "
                "shape (per example, after the loader)"))
    missing = sorted(first_primary - seen)
    if missing:
        ctx.check(at + ("primary_features",), f"source {name!r} does not give tensor(s) {', '.join(map(repr, missing))}, "
                                              f"which source {first_name!r} gives: expected every source to give the "
                                              "same tensors")
    return Source(name, i, dataset, tuple(primary), 0.0, json_path(at))


def _weighted(ctx: SectionContext, entries: list, sources: list[Source]) -> list[Source]:
    """Each source with its weight: as given, or (none given) its record count from its manifest."""
    given = ["weight" in e for e in entries]
    if all(given):
        empty = [s.name for s in sources if (c := record_counts(s.dataset.manifest, s.dataset.files)) is not None
                 and sum(c) == 0]
        if empty:
            ctx.check(("args", "sources"), f"source(s) {', '.join(map(repr, empty))} hold no records by their "
                                           "manifests: a source with nothing to draw would end or stall the mix; "
                                           "expected records in every source")
        return [dataclasses.replace(s, weight=float(e["weight"])) for s, e in zip(sources, entries)]
    if any(given):
        missing = [s.name for s, g in zip(sources, given) if not g]
        ctx.check(("args", "sources"), f"found weights for some sources but not for {', '.join(map(repr, missing))}: "
                                       "expected a weight for every source, or none (each source then weighs its "
                                       "number of records)")
        return sources
    counts = [record_counts(s.dataset.manifest, s.dataset.files) for s in sources]
    unknown = [s.name for s, c in zip(sources, counts) if c is None]
    if unknown:
        ctx.check(("args", "sources"), f"found no weights, and the manifest(s) of {', '.join(map(repr, unknown))} list "
                                       "no record counts: without weights each source weighs its number of records; "
                                       "expected a weight for every source, or counts in every manifest "
                                       "(`batchloaders manifest DIR`)")
        return sources
    totals = [sum(c) for c in counts]
    empty = [s.name for s, t in zip(sources, totals) if t == 0]
    if empty:
        ctx.check(("args", "sources"), f"source(s) {', '.join(map(repr, empty))} hold no records, so without weights "
                                       "they would never be drawn: expected records, or weights")
        return sources
    return [dataclasses.replace(s, weight=float(t)) for s, t in zip(sources, totals)]


def check_mixture_features(ctx: SectionContext) -> None:
    """A mixture_source secondary feature needs sources to say which one an example came from."""
    if "sources" in ctx.args:
        return
    for i, feature in ctx.items("secondary_features"):
        if feature.get("type") == "mixture_source":
            ctx.check(("args", "secondary_features", i, "type"), "secondary feature type 'mixture_source' says which "
                                                                 "source of a mixture an example came from, and there "
                                                                 "is one dataset: expected sources in args")
