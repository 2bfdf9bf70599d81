"""Turn a loader config document into a checked, typed :class:`LoaderConfig`.

Order: schema check (structure) -> dataset and manifest -> semantic checks a
schema cannot express (names, references, ranks, loader rules, memory) ->
frozen objects. Semantic checks run on every part that passed the schema, and
every problem found, of either kind, is collected and raised together.
"""
from __future__ import annotations

import os
from typing import Iterable, Mapping

from batchloaders.errors import ConfigError, PluginsNotChecked, Problem
from batchloaders.transform import builtin_types
from batchloaders.transform.registry import ALWAYS
from batchloaders.config.document import Document, check_plain, load_file, parse_text
from batchloaders.core.model import LoaderConfig
from batchloaders.config.stage_rules import AFTER_PADDING, AFTER_STEPS, BEFORE_MODEL
from batchloaders.config.sections import dataset, loader, model, padding, primary, reading, regroup, resources
from batchloaders.config.sections import secondary, service, shuffling, sources, steps
from batchloaders.config.sections.context import Checker, SectionContext
from batchloaders.config.sections.plugins import load_plugins, plugin_entries, set_aside


def load_config(config: str | os.PathLike | Mapping, *, model_names: tuple[Iterable[str], Iterable[str]] | None = None,
                trust_plugins: bool = True) -> LoaderConfig:
    """Load a config from a path (.yaml/.yml/.json) or a dict and check it completely.

    Example:
        >>> config = batchloaders.load_config("configs/chars_independent.yaml")
        >>> config.target_batch_size
        64

    Args:
        config: a path to a .yaml/.yml/.json config, or a dict of one.
        model_names: (inputs, targets) replaces the config's ``model`` block (used when a Keras model is
            passed to ``build_input_fn``).
        trust_plugins: import the config's ``plugins:``. False (the command line without ``--trust-plugins``)
            imports none of them: every other part is checked. Either way each entry must be a .py file inside
            the config's directory tree.

    Returns:
        The checked config, frozen.

    Raises:
        ConfigError: every problem found in the config, of its schema and beyond (names, references, ranks,
            loader rules, memory), at once; ``config`` neither a path nor a dict.
        PluginsNotChecked: (with ``trust_plugins=False``) a config whose only gap is its plugin types, naming
            them.
        ManifestError: every problem of the dataset's manifest.
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


def config_from_document(doc: Document, *, model_names=None, trust_plugins: bool = True) -> LoaderConfig:
    from batchloaders.config.schema import schema_check  # deferred: jsonschema loads only when a config is checked

    builtin_types.load()
    listed = plugin_entries(doc)
    scopes = ALWAYS | (load_plugins(doc, listed) if trust_plugins else frozenset())  # the types it may name
    problems, invalid = schema_check(doc, "loader_config.schema.json", scopes)
    unchecked: dict[tuple, Problem] = {}  # path of an item of a plugin type not imported -> the notice
    if listed and not trust_plugins:
        problems, unchecked = set_aside(doc, problems, invalid, scopes, [e for _, e in listed])
    written = doc
    doc = sources.first_source_view(doc)
    data = doc.data
    check = Checker(doc, problems, invalid)
    # Semantic checks need a known loader type and an args object; past that, they run on
    # every part that passed the schema, so one run reports both kinds of problem.
    if problems and not (isinstance(data, dict) and check.valid(("type",)) and isinstance(data.get("args"), dict)
                         and ("args",) not in invalid):
        raise ConfigError(problems)
    ctx = SectionContext(doc, check, scopes=scopes, unchecked=unchecked, model_names=model_names)
    dataset.check_dataset(ctx)
    model.check_model(ctx)
    primary.check_primary(ctx)
    sources.check_sources(ctx, written)
    if ctx.manifest is None:  # without a manifest no tensor can be typed: report what is known now
        secondary.claim_names(ctx)
        model.check_produced(ctx)
        raise check.error()
    secondary.check_secondary(ctx)
    sources.check_mixture_features(ctx)
    steps.check_steps(ctx)
    regroup.check_stages(ctx, AFTER_STEPS)
    service.check_service(ctx)
    regroup.check_stages(ctx, BEFORE_MODEL)
    model.check_produced(ctx)
    padding.check_padding(ctx)
    regroup.check_stages(ctx, AFTER_PADDING)
    regroup.check_row_batching(ctx)
    loader.check_loader_args(ctx)
    shuffling.check_shuffle_scope(ctx)
    resources.check_memory_and_counts(ctx)
    if check.problems:
        raise check.error()
    if unchecked:
        raise PluginsNotChecked(sorted(unchecked.values(), key=lambda p: (p.line or 0, p.path)))
    return _loader_config(ctx)


def _loader_config(ctx: SectionContext) -> LoaderConfig:
    """The checked config, frozen."""
    args, regrouped = ctx.args, ctx.regroup
    regroup.primary_extra(ctx)  # e.g. a manifest feature read only to key segmenting's sequences
    return LoaderConfig(
        source=ctx.doc.source, type=ctx.loader_type, name=ctx.data.get("name"), inputs=ctx.inputs,
        targets=ctx.targets, model_assumed=ctx.model_assumed,
        dataset=ctx.dataset, target_batch_size=args["target_batch_size"], drop_remainder=args["drop_remainder"],
        epochs=args["epochs"], reading=reading.read_options(ctx), shuffling=shuffling.shuffle_options(ctx),
        window=loader.window_spec(ctx), primary_features=tuple(ctx.primary),
        secondary_features=tuple(ctx.secondary), processing_steps=tuple(ctx.steps), padding=ctx.padding,
        pad_specs=ctx.pad_specs, multi_load=bool(args.get("multi_load", False)), seed=args.get("seed"),
        resume=args.get("resume", shuffling.default_resume(args, regrouped)),  # replay under a global shuffle
        sources=tuple(ctx.sources), mixing=ctx.mixing, tensors=dict(ctx.tensors), service=ctx.service,
        regroup=next((spec for spec in regrouped.values() if spec is not None), None))  # they exclude each other
