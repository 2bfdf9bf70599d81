"""Turn a loader config document into a checked, typed :class:`LoaderConfig`.

Order: schema check (structure) -> dataset and manifest -> semantic checks a
schema cannot express (names, references, ranks, loader rules, memory) ->
frozen objects. Semantic checks run on every part that passed the schema, and
every problem found, of either kind, is collected and raised together.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterable, Mapping

from batchloaders.errors import (BatchLoaderError, ConfigError, ManifestError, PluginsNotChecked, Problem, json_path,
                                 path_parts, suggest)
from batchloaders.transform import builtin_types
from batchloaders.transform.registry import ALWAYS, BATCHERS, POLICIES, SECONDARY, STEPS, CheckContext
from batchloaders.config import datasets
from batchloaders.config import accounting
from batchloaders.config.resources import check_resources
from batchloaders.config.document import Document, check_plain, load_file, parse_text
from batchloaders.config.values import check_value
from batchloaders.config.model import (LoaderConfig, PadSpec, PrimaryFeature, SecondaryFeature, Step,
                                     TensorInfo)


def load_config(config: str | os.PathLike | Mapping, *, model_names: tuple[Iterable[str], Iterable[str]] | None = None,
                trust_plugins: bool = True) -> LoaderConfig:
    """Load a config from a path (.yaml/.yml/.json) or a dict and check it completely.

    ``model_names`` = (inputs, targets) replaces the config's ``model`` block
    (used when a Keras model is passed to ``build_input_fn``). ``trust_plugins=False`` (the
    command line without ``--trust-plugins``) imports none of the config's ``plugins:``: every
    other part is checked, and a config whose only gap is its plugin types raises
    :class:`PluginsNotChecked` naming them. Either way each entry must be a .py file inside
    the config's directory tree.
    """
    if isinstance(config, Mapping):
        check_plain(config, "<dict>", ConfigError)
        doc = Document(dict(config), "<dict>", os.getcwd(), {})
    elif isinstance(config, (str, os.PathLike)):
        doc = load_file(config, ConfigError)
    else:
        raise ConfigError(Problem("<config>", "$", f"found a {type(config).__name__}: expected a path to a "
                                                  ".yaml/.json config or a dict"))
    return config_from_document(doc, model_names=model_names, trust_plugins=trust_plugins)


def config_from_text(text: str, source: str = "<text>", *, base_dir: str = ".", model_names=None) -> LoaderConfig:
    return config_from_document(parse_text(text, source, ConfigError, base_dir=base_dir), model_names=model_names)


class _Checker:
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
        n = len(parts)
        return not any(bad[:n] == parts or parts[:len(bad)] == bad for bad in self.invalid)


def config_from_document(doc: Document, *, model_names=None, trust_plugins: bool = True) -> LoaderConfig:
    from batchloaders.config.schema import schema_check

    builtin_types.load()
    listed = _plugin_entries(doc)
    scopes = ALWAYS | (_load_plugins(doc, listed) if trust_plugins else frozenset())  # the types it may name
    problems, invalid = schema_check(doc, "loader_config.schema.json", scopes)
    unchecked: dict[tuple, Problem] = {}  # path of an item of a plugin type not imported -> the notice
    if listed and not trust_plugins:
        problems, unchecked = _set_aside(doc, problems, invalid, scopes, [e for _, e in listed])
    data = doc.data
    check = _Checker(doc, problems, invalid)
    # Semantic checks need a known loader type and an args object; past that, they run on
    # every part that passed the schema, so one run reports both kinds of problem.
    if problems and not (isinstance(data, dict) and check.valid(("type",)) and isinstance(data.get("args"), dict)
                         and ("args",) not in invalid):
        raise ConfigError(problems)
    args = data["args"]
    loader_type = data["type"]
    valid = check.valid

    def value(*parts, default=None):
        """args[parts...] when present and schema-valid, else ``default``."""
        node = args
        for part in parts:
            if not valid(("args",) + parts) or not isinstance(node, (dict, list)):
                return default
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                return default
        return node

    def items(key: str) -> list[tuple[int, dict]]:
        """(index, item) of each schema-valid entry of the list args[key]."""
        entries = args.get(key, ())
        if not isinstance(entries, list):
            return []
        return [(i, e) for i, e in enumerate(entries) if valid(("args", key, i))]

    # The dataset and its manifest come first: every from_name is checked against it. When
    # they cannot be found, the checks that need no manifest still run and report too.
    dataset = None
    if valid(("args", "dataset")):
        try:
            dataset = datasets.resolve(args["dataset"], doc)
        except BatchLoaderError as error:
            check.problems.extend(error.problems)
    manifest = dataset.manifest if dataset is not None else None

    model_known, model_assumed = True, False
    if model_names is not None:
        inputs, targets = (tuple(n) for n in model_names)
    elif "model" in data and valid(("model",)):
        inputs, targets = tuple(data["model"].get("inputs", ())), tuple(data["model"].get("targets", ()))
    elif "model" in data:
        inputs, targets, model_known = (), (), False  # reported by the schema; unknown names check nothing
    else:  # no model block: every feature the config makes is an input (a model given in code names them)
        made = [e.get("to_name") for key in ("primary_features", "secondary_features")
                for e in (args.get(key) if isinstance(args.get(key), list) else ()) if isinstance(e, dict)]
        inputs, targets = tuple(dict.fromkeys(n for n in made if isinstance(n, str) and n)), ()
        model_assumed = True
    if model_known and (model_names is not None or "model" in data):
        if not inputs:
            where = ("model",) if model_names is None else ("model", "inputs")
            check(where, "found no model input: expected at least one to_name in model.inputs")
    for name in set(inputs) & set(targets):
        check(("model", "targets"), f"{name!r} is both a model input and a model target: expected each once")
    wanted = set(inputs) | set(targets)

    seen: dict[str, tuple] = {}
    tensors: dict[str, TensorInfo] = {}
    primaries: dict = {}
    # The segmenting key is read to name the sequences, not to feed the model.
    segmenting_block = args.get("segmenting") if valid(("args", "segmenting")) else None
    key_tensor = segmenting_block.get("key") if isinstance(segmenting_block, dict) else None

    def claim(to_name: str, at: tuple) -> None:
        if to_name in seen:
            check(at + ("to_name",), f"duplicate to_name {to_name!r} (first defined at {json_path(seen[to_name])}): "
                                     "every to_name must be unique")
        else:
            seen[to_name] = at + ("to_name",)
        if (model_known and (wanted or model_names is not None or "model" in data) and to_name not in wanted
                and to_name != key_tensor):
            check(at + ("to_name",), f"to_name {to_name!r} is constructed but not used by the model: expected one "
                                     f"of the model's inputs or targets ({', '.join(sorted(wanted))})"
                                     f"{suggest(to_name, wanted)}")

    unnamed = []  # broken entries whose to_name is unknown: they may produce any model tensor

    def claim_broken(key: str) -> None:
        """Entries that broke the schema still define their to_name: later checks stay quiet about it."""
        entries = args.get(key, [])
        if not isinstance(entries, list) or (not valid(("args", key)) and not entries):
            unnamed.append(key)
        for i, entry in enumerate(entries if isinstance(entries, list) else ()):
            name = entry.get("to_name") if isinstance(entry, dict) else None
            if valid(("args", key, i)):
                continue
            if isinstance(name, str) and valid(("args", key, i, "to_name")):
                seen.setdefault(name, ("args", key, i, "to_name"))
            else:
                unnamed.append(key)

    lo, hi = value("min_window"), value("max_window")
    window = lo if loader_type != "independent" and lo is not None and lo == hi else None
    primary = []
    for i, p in items("primary_features"):
        at = ("args", "primary_features", i)
        claim(p["to_name"], at)
        primary.append(PrimaryFeature(p["from_name"], p["to_name"], json_path(at)))
        if manifest is None:
            continue
        feature = manifest.features.get(p["from_name"])
        if feature is None:
            check(at + ("from_name",), f"feature {p['from_name']!r} is not in the manifest {manifest.path}"
                                       f"{suggest(p['from_name'], manifest.features)}; available: "
                                       f"{', '.join(manifest.features)}")
            continue
        primaries[p["to_name"]] = feature
        tensors[p["to_name"]] = _primary_info(feature, loader_type, manifest.allow_var_len, window, check.at(at))
    claim_broken("primary_features")

    if manifest is None:  # without a manifest no tensor can be typed: report what is known now
        for i, s2 in items("secondary_features"):
            claim(s2["to_name"], ("args", "secondary_features", i))
        claim_broken("secondary_features")
        if model_known and not unnamed:
            _unproduced(inputs, targets, seen, check)
        raise check.error()

    def context(at: tuple) -> CheckContext:
        return CheckContext(loader_type, tensors, primaries, check.at(at), doc.base_dir)

    secondary: list[SecondaryFeature] = []
    deferred: dict[str, tuple] = {}  # to_name -> (index in secondary, at, kind, args): built after steps

    def infer_secondary(index: int, at: tuple, kind, item_args: dict) -> None:
        info = kind.infer(item_args, context(at))
        if info is not None:
            tensors[secondary[index].to_name] = info
        secondary[index] = dataclasses.replace(secondary[index], info=info)

    for i, s in items("secondary_features"):
        at = ("args", "secondary_features", i)
        claim(s["to_name"], at)
        kind = SECONDARY.get(s["type"], scopes)
        item_args = dict(s.get("args", {}))
        secondary.append(SecondaryFeature(s["to_name"], s["type"], item_args, json_path(at), None))
        if kind is None:  # the schema lists the types, so this means schema and registry disagree
            check(at + ("type",), f"unknown secondary feature type {s['type']!r}"
                                  f"{suggest(s['type'], SECONDARY.names(scopes))}")
        elif loader_type not in kind.loaders:
            check(at + ("type",), f"secondary feature type {s['type']!r} is not available for the {loader_type} "
                                  f"loader: expected one of {', '.join(kind.loaders)} loaders")
        elif kind.after_chunking and "chunking" not in args:
            check(at + ("type",), f"secondary feature type {s['type']!r} describes a chunk, and there are no chunks: "
                                  "expected a chunking block in args (chunk metadata exists only once examples are "
                                  "cut into chunks)")
        elif kind.measures:  # e.g. length: it sees its tensor as the processing steps leave it
            deferred[s["to_name"]] = (len(secondary) - 1, at, kind, item_args)
        else:
            infer_secondary(len(secondary) - 1, at, kind, item_args)
    claim_broken("secondary_features")

    steps = []
    all_steps = args.get("processing_steps", [])
    measured_late = {}  # to_name of a deferred feature -> where a step first used it
    for i, st in enumerate(all_steps if isinstance(all_steps, list) else []):
        at = ("args", "processing_steps", i)
        if not valid(at):
            # A broken step, or one of a plugin type not imported, leaves its tensor unknown: nothing
            # can say what it would become. The tensor it names must exist all the same.
            if isinstance(st, dict) and isinstance(st.get("tensor"), str):
                if at + ("type",) in unchecked and st["tensor"] not in seen and valid(at + ("tensor",)):
                    check(at + ("tensor",), f"tensor {st['tensor']!r} is not a primary or secondary feature"
                                            f"{suggest(st['tensor'], seen)}; expected one of: {', '.join(seen)}")
                tensors.pop(st["tensor"], None)
            continue
        kind, name, step_args = STEPS.get(st["type"], scopes), st["tensor"], dict(st.get("args", {}))
        if name in deferred:  # a step on a deferred feature: build it now, from what the steps so far left
            measured_late[name] = at
            infer_secondary(*deferred.pop(name))
        for feature, first_use in measured_late.items():
            measured = secondary_measures(secondary, feature)
            if measured == name:
                check(at + ("tensor",), f"this step changes tensor {name!r} after a step on {feature!r} "
                                        f"({json_path(first_use)}), which measures {name!r} once its steps have "
                                        f"run: expected every step on {name!r} before the first step on {feature!r}")
        info_in = tensors.get(name)
        output = None
        if name not in seen:
            check(at + ("tensor",), f"tensor {name!r} is not a primary or secondary feature"
                                    f"{suggest(name, seen)}; expected one of: {', '.join(seen)}")
        elif kind is None:
            check(at + ("type",), f"unknown processing step type {st['type']!r}"
                                  f"{suggest(st['type'], STEPS.names(scopes))}")
        elif loader_type not in kind.loaders:
            check(at + ("type",), f"processing step type {st['type']!r} is not available for the {loader_type} "
                                  f"loader: expected one of {', '.join(kind.loaders)} loaders")
        elif name in tensors:
            output = kind.infer(step_args, tensors[name], context(at))
            if output is None:
                del tensors[name]  # already reported; keep later checks quiet about it
            else:
                tensors[name] = output
        steps.append(Step(name, st["type"], step_args, json_path(at), info_in, output))
    for pending in list(deferred.values()):
        infer_secondary(*pending)

    chunking = None
    if "chunking" in args and valid(("args", "chunking")):
        from batchloaders.config.chunk_rules import chunk_spec

        others = [key for key in ("packing", "bucketing") if key in args]
        # A discrete window's per-record features have a record axis, not a time axis: copied, not chunked.
        per_record = {p.to_name for p in primary if loader_type == "discrete_sequence"
                      and p.from_name in manifest.features and not manifest.features[p.from_name].var_len}
        chunking = chunk_spec(args["chunking"], tensors, seen, inputs + targets, secondary, steps, others, check,
                              per_record)
    segmenting = None
    if segmenting_block is not None:
        from batchloaders.config.segment_rules import segment_spec

        others = [key for key in ("packing", "bucketing", "chunking") if key in args]
        segmenting = segment_spec(segmenting_block, tensors, seen, inputs + targets, loader_type, manifest, others,
                                  value("target_batch_size", default=0), check, primaries)
    service = None
    if "service" in args and valid(("args", "service")):
        from batchloaders.config.service_rules import service_spec

        service = service_spec(args["service"], value("epochs"), check, loader_type, args)
    packing = None
    if "packing" in args and valid(("args", "packing")):
        from batchloaders.config.pack_rules import pack_spec

        packing = pack_spec(args["packing"], tensors, seen, wanted, "bucketing" in args, check)
    if model_known and not unnamed:
        _unproduced(inputs, targets, seen, check)

    padding, pad_specs = False, {}
    if valid(("args", "padding")):
        padding, pad_specs = _padding(args.get("padding", False), tensors, seen, check, scopes)
    bucketing = None
    if "bucketing" in args and valid(("args", "bucketing")):
        from batchloaders.config.bucket_rules import bucket_spec, window_bounds

        bounds = window_bounds(loader_type, args.get("max_window"), primaries, steps)
        bucketing = bucket_spec(args["bucketing"], tensors, seen, check, pad_specs, wanted or set(seen), bounds)
    if packing is not None:  # rows are dense: a row holds several examples, so no row is "an example"
        for name in packing.tensors:
            spec = pad_specs.get(name)
            if spec is not None and spec.batching != "padded":
                check(path_parts(spec.json_path) + ("batching",), f"found batching {spec.batching!r} for tensor {name!r}, which packing "
                                             "fills rows of a fixed length with: expected padded (a packed row is "
                                             "not one example)")
    if segmenting is not None:  # a segment is num_unroll steps wide; its length is the `length` counter
        for name in segmenting.tensors:
            spec = pad_specs.get(name)
            if spec is not None and spec.batching not in ("padded", "dense"):
                check(path_parts(spec.json_path) + ("batching",),
                      f"found batching {spec.batching!r} for tensor {name!r}, which segmenting cuts into segments "
                      f"of num_unroll steps: expected padded (each segment's real steps are in the "
                      f"{segmenting.names['length']!r} counter)")
    rules_ok = all(valid(("args", k)) for k in ("min_window", "max_window", "multi_load", "primary_features",
                                                  "padding", "secondary_features", "processing_steps"))
    if rules_ok:
        _loader_rules(loader_type, args, manifest, tensors, padding, secondary, steps, check)
    if not check.problems and not unchecked:  # (the memory of a tensor a plugin makes is unknown)
        check_resources(args, loader_type, tensors, pad_specs, wanted or set(seen), check, steps, chunking)
    if not check.problems:  # the manifest's record counts, when it lists the files
        check.problems.extend(accounting.size_problems(dataset))
        accounting.empty_output_problems(args, loader_type, dataset, check)

    if check.problems:
        raise check.error()
    if unchecked:
        raise PluginsNotChecked(sorted(unchecked.values(), key=lambda p: (p.line or 0, p.path)))

    def opt(key, default=None):
        value = args.get(key, default)
        return None if value == -1 else value

    shuffle = bool(args.get("shuffle", False))
    if segmenting is not None and segmenting.key_from_manifest is not None:  # read only to key the sequences
        primary.append(PrimaryFeature(segmenting.key_from_manifest, segmenting.key, json_path(("args", "segmenting",
                                                                                                "key"))))
    return LoaderConfig(
        source=doc.source, type=loader_type, name=data.get("name"), inputs=inputs, targets=targets,
        model_assumed=model_assumed,
        dataset=dataset, target_batch_size=args["target_batch_size"], drop_remainder=args["drop_remainder"],
        epochs=args["epochs"], num_parallel_reads=opt("num_parallel_reads"),
        num_parallel_parses=opt("num_parallel_parses"), num_read_buffer_bytes=args["num_read_buffer_bytes"],
        num_prefetch=opt("num_prefetch"), shuffle=shuffle,
        num_shuffle_buffer_elements=args.get("num_shuffle_buffer_elements"),
        num_filenames_shuffle_buffer=args.get("num_filenames_shuffle_buffer"),
        num_mix_files=args.get("num_mix_files"), sloppy_interleave=bool(args.get("sloppy_interleave", False)),
        num_interleave_out_buffer_elements=args.get("num_interleave_out_buffer_elements", 1),
        num_interleave_in_buffer_elements=args.get("num_interleave_in_buffer_elements", 1),
        primary_features=tuple(primary), secondary_features=tuple(secondary), processing_steps=tuple(steps),
        padding=padding, pad_specs=pad_specs, multi_load=bool(args.get("multi_load", False)),
        min_window=args.get("min_window"), max_window=args.get("max_window"), stride=args.get("stride"),
        seed=args.get("seed"), resume=args.get("resume", "state"), on_corrupt=args.get("on_corrupt", "fail"),
        tensors=dict(tensors), regroup=bucketing or packing or chunking or segmenting,
        service=service)


def secondary_measures(secondary, to_name: str) -> str | None:
    """The tensor a deferred secondary feature (``measures``) named ``to_name`` measures."""
    for feature in secondary:
        if feature.to_name == to_name:
            kind = SECONDARY.get(feature.type)
            return feature.args.get(kind.measures) if kind is not None and kind.measures else None
    return None


def _plugin_entries(doc: Document) -> list[tuple[int, str]]:
    """(index, entry) of the config's ``plugins`` list, each a .py file inside the config's directory
    tree (else a ConfigError at the entry); checked without importing anything."""
    from batchloaders.transform import plugins

    entries = doc.data.get("plugins") if isinstance(doc.data, dict) else None
    if not isinstance(entries, list):
        return []  # absent, or reported by the schema check
    named = [(i, e) for i, e in enumerate(entries) if isinstance(e, str) and e]
    problems = [doc.problem(("plugins", i), why) for i, e in named if (why := plugins.entry_problem(e, doc.base_dir))]
    if problems:
        raise ConfigError(problems)
    return named


def _load_plugins(doc: Document, named: list[tuple[int, str]]) -> frozenset:
    """Import the modules the config's ``plugins`` list names, before anything looks a type up;
    returns their scopes (the types registered by them are visible to this config)."""
    from batchloaders.transform import plugins

    scopes, problems = plugins.load([e for _, e in named], base_dir=doc.base_dir)
    if problems:
        raise ConfigError([doc.problem(("plugins", named[i][0]), message) for i, message in problems])
    return frozenset(scopes)


# Where a config names a registered type: (list under args, key naming the type) -> its registry.
_TYPE_KEYS = {("processing_steps", "type"): STEPS, ("secondary_features", "type"): SECONDARY,
              ("padding", "batching"): BATCHERS}


def _set_aside(doc: Document, problems: list[Problem], invalid: set, scopes, files: list[str]
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


def _unproduced(inputs, targets, seen: dict, check) -> None:
    """Every model input and target must be produced by a primary or secondary feature."""
    for name in (*inputs, *targets):
        if name not in seen:
            where = ("model", "inputs" if name in inputs else "targets")
            check(where, f"model tensor {name!r} is not produced by any primary or secondary feature"
                         f"{suggest(name, seen)}; produced: {', '.join(seen) or 'nothing'}")


def _primary_info(feature, loader_type: str, allow_var_len: bool, window: int | None, report) -> TensorInfo:
    """Per-example shape of a primary feature once the loader has assembled an example or window.

    ``window`` is the window size when min_window == max_window, else None.
    """
    shape = tuple(feature.shape)
    if loader_type == "independent":
        if feature.var_len:
            return TensorInfo(feature.dtype, (None,) + shape)
        return TensorInfo(feature.dtype, feature.record_shape)
    # Sequence loaders put a window axis first. Whole-record tensors are concatenated along
    # their first axis (continuous, and discrete feature lists) or stacked one row per record
    # (discrete context features).
    if loader_type == "discrete_sequence":
        if feature.var_len:  # the records of a window hold different numbers of steps
            return TensorInfo(feature.dtype, (None,) + shape)
        return TensorInfo(feature.dtype, (window,) + feature.record_shape)
    if feature.var_len:
        return TensorInfo(feature.dtype, (window,) + shape)
    if feature.raw_len > 1:
        return TensorInfo(feature.dtype, (window,) + shape)  # the raw strings are the time axis
    if allow_var_len:
        report(("from_name",), f"feature {feature.name!r} is a context feature (var_len false): the "
                               "continuous_sequence loader concatenates records along time, so it needs "
                               "feature lists (var_len true) when records are SequenceExamples")
    if not shape:
        report(("from_name",), f"feature {feature.name!r} is a scalar per record: the continuous_sequence "
                               "loader needs at least one axis to concatenate records along")
        return TensorInfo(feature.dtype, (window,))
    return TensorInfo(feature.dtype, (window,) + shape[1:])


def _padding(value: Any, tensors: dict, seen: dict, check, scopes) -> tuple[bool, dict]:
    if value is False or value == []:
        return False, {}
    if value is True:
        return True, {}
    specs: dict[str, PadSpec] = {}
    for i, p in enumerate(value):
        at = ("args", "padding", i)
        name = p["tensor"]
        if name not in seen:
            check(at + ("tensor",), f"tensor {name!r} is not a primary or secondary feature{suggest(name, seen)}")
            continue
        if name in specs:
            check(at + ("tensor",), f"duplicate padding for tensor {name!r}: expected one entry per tensor")
            continue
        info = tensors.get(name)
        shape = tuple(p["shape"]) if "shape" in p else None
        if info is not None and shape is not None:
            if len(shape) != info.rank:
                check(at + ("shape",), f"found a shape of rank {len(shape)} {list(shape)} for tensor {name!r} of "
                                       f"rank {info.rank}: expected {info.rank} entries (no batch axis; -1 = batch "
                                       "maximum)")
            else:
                for axis, (want, dim) in enumerate(zip(shape, info.shape)):
                    if want != -1 and dim is not None and want < dim:
                        check(at + ("shape", axis), f"found {want} on axis {axis} but the tensor is {dim} long "
                                                    f"there: expected -1 or at least {dim} (padding never cuts)")
        if info is not None and "value" in p:
            why = check_value(p["value"], info.dtype)
            if why:
                check(at + ("value",), why)
        batching = p.get("batching", "padded")
        _batching_rules(p, batching, name, info, at, check, scopes)
        specs[name] = PadSpec(name, shape, p.get("value"), json_path(at), batching, dict(p.get("batching_args", {})))
    return True, specs


def _batching_rules(entry: dict, batching: str, name: str, info, at: tuple, check, scopes) -> None:
    """What a batching policy needs of its tensor and of the entry's other keys."""
    if batching != "padded":
        for key in ("shape", "value"):
            if key in entry:
                check(at + (key,), f"found {key} with batching {batching!r}: shape and value apply to padded "
                                   "batching only; expected no shape or value, or batching padded")
    if "batching_args" in entry and BATCHERS.get(batching, scopes) is None:
        check(at + ("batching_args",), f"found batching_args with batching {batching!r}: expected them only with a "
                                       f"registered batcher ({', '.join(BATCHERS.names(scopes)) or 'none is registered'})")
    if info is None:
        return
    shape = "[" + ", ".join("?" if d is None else str(d) for d in info.shape) + "]"
    if batching == "dense" and None in info.shape:
        check(at + ("batching",), f"tensor {name!r} has shape {shape}, whose length varies between examples: dense "
                                  "batching stacks examples of one shape; expected padded, ragged or sparse "
                                  "batching, or a fixed length")
    if batching == "ragged" and info.rank == 0:
        check(at + ("batching",), f"tensor {name!r} is a scalar per example (shape []): ragged batching needs an "
                                  "axis to be ragged along; expected dense, padded or sparse batching")


def _loader_rules(loader_type, args, manifest, tensors, padding, secondary, steps, check) -> None:
    # (shuffle's required arguments are a schema rule: common_args.schema.json)
    if args.get("multi_load", False):
        why = [w for w, bad in (("records are variable length (allow_var_len is true)", manifest.allow_var_len),
                                ("secondary_features are given", bool(secondary)),
                                ("processing_steps are given", bool(steps)),
                                ("padding is enabled", padding)) if bad]
        if why:
            check(("args", "multi_load"), "multi_load must be false when " + " and ".join(why)
                                          + " (the compiler parses in batches on its own whenever that gives "
                                            "identical results, so multi_load is not needed for speed)")
    window_varies = False
    if loader_type != "independent":
        lo, hi = args["min_window"], args["max_window"]
        window_varies = lo < hi  # lo > hi is reported here; saying it needs padding too would be noise
        if lo > hi:
            check(("args", "min_window"), f"found min_window {lo} > max_window {hi}: expected min_window <= max_window")
    if loader_type == "continuous_sequence" and not manifest.allow_var_len:
        # Example records are concatenated along their first axis, which the manifest fixes:
        # every selected feature needs the same length there.
        first = None
        for i, p in enumerate(args["primary_features"]):
            feature = manifest.features.get(p["from_name"])
            steps = feature.steps_per_record if feature is not None else None
            if steps is None:
                continue  # unknown or scalar features are reported elsewhere
            if first is None:
                first = (p["from_name"], steps)
            elif steps != first[1]:
                check(("args", "primary_features", i, "from_name"),
                      f"feature {p['from_name']!r} has {steps} steps per record along its first axis but "
                      f"{first[0]!r} has {first[1]}: the continuous_sequence loader concatenates records along "
                      "that axis, so every selected feature needs the same length per record")
    if padding or (loader_type != "independent" and lo > hi):  # no window size to pad to yet
        return
    variable = [name for name, info in tensors.items() if None in info.shape]
    if window_varies and variable:
        unit = "records" if loader_type == "discrete_sequence" else "steps"
        check(("args", "padding"), f"min_window {lo} != max_window {hi}: windows of different lengths "
                                   f"({lo}..{hi} {unit}) cannot be stacked into a batch without padding (tensors "
                                   f"{', '.join(map(repr, variable))}): enable padding (padding true or a padding "
                                   "list) or fix the window length (min_window equal to max_window)")
        # Feature lists of discrete windows vary even with a fixed window size: say so too.
        lists = {p["to_name"] for p in args["primary_features"]
                 if p["from_name"] in manifest.features and manifest.features[p["from_name"]].var_len}
        variable = [name for name in variable if loader_type == "discrete_sequence" and name in lists]
    for name in variable:
        info = tensors[name]
        check(("args", "padding"), f"tensor {name!r} has a variable length axis (shape "
              f"{['?' if d is None else d for d in info.shape]}) and cannot be batched without padding: "
              "expected padding true (or a padding list), or a fixed length")
