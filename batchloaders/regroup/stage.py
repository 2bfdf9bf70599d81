"""The interface every regroup stage implements, and their registry.

A stage turns the loader's examples into the model's batches: plain batching (one example after
another), or a regrouping (bucketing, packing, chunking, segmenting). The compile template
(input_fn.py) asks the config's one stage what it needs from the loader, then lets it apply itself;
``describe``, ``preview`` and ``bench`` ask it what it makes and how much of it is padding. A config's stage
is the stage registered under its ``regroup`` spec's ``stage`` name (core/model.py), or ``batch`` when it has
none. What the config check asks of a stage (its block's check, schema and phase) is the part it inherits from
config/stage_rules.py's ``StageRules``, whose registry this module's :func:`register` fills.

Stage modules (regroup/stages/) import no TensorFlow at the top, so that ``describe`` and ``validate``
can ask them without it; their ``apply`` imports the graph code it runs.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, ClassVar

from batchloaders.errors import suggest
from batchloaders.core.model import LoaderConfig, format_shape
from batchloaders.config.stage_rules import PHASES, STAGES, StageRules

if TYPE_CHECKING:  # for annotations only: the stages are asked without TensorFlow
    import tensorflow as tf

PLAIN = "batch"


@dataclasses.dataclass(frozen=True)
class SourcePlan:
    """What a stage asks of the loader (:meth:`Stage.source_plan`).

    Attributes:
        block: examples per element of the loader's.
        drop_remainder: whether the loader's own batching drops a last smaller element.
        one_epoch: False: the loader repeats the epochs; True: it gives one epoch and leaves the epochs to the
            stage, which then calls ``source()`` once per epoch (for that epoch's draws).
    """

    block: int
    drop_remainder: bool
    one_epoch: bool = False


@dataclasses.dataclass
class Build:
    """What one ``input_fn()`` call hands its stage (:meth:`Stage.apply`).

    Attributes:
        config: the call's config, each bucket's batch size split among the replicas (:meth:`Stage.per_replica`).
        batch_size: the call's batch size, per input pipeline.
        source: the loader's source, as :meth:`Stage.source_plan` asked for it: ``source()`` -> (elements,
            decode), ``decode`` None when the loader finished its blocks of examples itself.
        pack_inputs: makes the model's features of a batch's input tensors (by name).
        pack_targets: makes the model's targets of a batch's target tensors (by name).
        zero_tails: the tensors the loader gives zero-padded to its batch's longest example (base.zero_tails).
        counters: the segment counters the features carry besides the model's inputs.
        share: what an empty-pass error adds about this input pipeline's share (sharding.share_note).
        report: the stage's running counts (its :meth:`Stage.counter`), None when not kept.
    """

    config: LoaderConfig
    batch_size: int
    source: Callable[[], tuple]
    pack_inputs: Callable
    pack_targets: Callable
    zero_tails: frozenset = frozenset()
    counters: tuple[str, ...] = ()
    share: str = ""
    report: object = None

    def model_batch(self, tensors: dict):
        """Padded tensors of a batch -> the model's (features, targets), packed the way the model takes them.

        Args:
            tensors: the batch's padded tensors by name.

        Returns:
            (features, targets); the features alone for a config without targets.
        """
        config = self.config
        features = self.pack_inputs({n: tensors[n] for n in config.inputs})
        if not config.targets:
            return features
        return features, self.pack_targets({n: tensors[n] for n in config.targets})


@dataclasses.dataclass(frozen=True)
class ShownPadding:
    """Padding a stage measures on the batches preview shows (:meth:`Stage.shown_padding`).

    Attributes:
        counts: per batch, {"real": {tensor: elements}, "padded": {...}}; None when not measured.
        how: where the real elements come from, for preview's padding line.
        unmeasured: why ``counts`` is None.
    """

    counts: list[dict] | None
    how: str
    unmeasured: str = ""


class Stage(StageRules):
    """One way of making batches. Subclasses set ``name`` (the config block's key), ``schema`` and ``check``
    (see StageRules) and override what differs from plain batching; a stage is registered with
    :func:`register`. The methods take the checked config; ``batch_size`` is the batch size of one input
    pipeline (the config's ``target_batch_size`` where no call gives another).

    Attributes:
        name: the stage's name: the key of its block in ``args`` (``batch``: plain batching).
        example_wise: whether batches are cut from the loader's examples in order, as they come: only then
            may the loader finish each example while it reads (decode, pad fixed shapes, split inputs from
            targets on blocks of examples), ``start_position`` and ``skip_batches`` start at a position of the
            order (instead of making and dropping batches), and describe count a mixture's batches.
        counted_as: what a batch is made of, for describe's "steps per epoch: unknown (...)".
        makes_examples: (StageRules) whether the stage makes examples of its own out of the loader's (chunks):
            the padding of the loader's batches is then not the model's, and bench always measures the stage's
            (:meth:`padding_dataset`).
        xla_compilable: whether a model may compile its step with XLA on the stage's batches (False: the
            features carry strings, as segmenting's counters carry the key).
    """

    name: ClassVar[str]
    example_wise: ClassVar[bool] = False
    counted_as: ClassVar[str] = "examples"
    xla_compilable: ClassVar[bool] = True

    def source_plan(self, config: LoaderConfig, batch_size: int) -> SourcePlan:
        """What the stage asks of the loader for the call's pipeline: by default blocks of ``batch_size``
        examples, the config's drop_remainder, the loader repeating the epochs.

        Args:
            config: the call's config.
            batch_size: the call's batch size.

        Returns:
            The plan; :meth:`apply` gets the loader's source made by it (``Build.source``).
        """
        return SourcePlan(batch_size, config.drop_remainder)

    def static_batch(self, config: LoaderConfig, batch_size: int) -> int | None:
        """The batch axis every batch has (the element_spec's, and describe's), or None when batches may be
        smaller.

        Args:
            config: the config.
            batch_size: the batch size asked for.

        Returns:
            By default ``batch_size`` when drop_remainder is true or the epochs endless, else None.
        """
        return batch_size if config.drop_remainder or config.epochs is None else None

    def batches(self, config: LoaderConfig, examples: int | None, batch_size: int) -> int | None:
        """How many batches ``examples`` examples make (the dataset's cardinality, describe's steps).

        Args:
            config: the config.
            examples: the examples an input pipeline gives over all its epochs; None when the manifest's
                counts do not fix them, or the epochs are endless.
            batch_size: the batch size.

        Returns:
            The count; None (the default) when only making the batches tells.
        """
        return None

    def counters(self, config: LoaderConfig) -> tuple[str, ...]:
        """Tensors the stage adds to every batch's features (segmenting's counters), model inputs or not.

        Args:
            config: the config.

        Returns:
            Their names; none by default.
        """
        return ()

    def carried(self, config: LoaderConfig) -> tuple[str, ...]:
        """Of :meth:`counters`, those the features carry besides the model's inputs.

        Args:
            config: the config.

        Returns:
            Their names, which describe and preview label as counters.
        """
        return tuple(name for name in self.counters(config) if name not in config.inputs)

    def per_replica(self, config: LoaderConfig, replicas: int) -> LoaderConfig:
        """The config one replica's pipeline runs, under tf.distribute with ``replicas`` replicas in sync.

        Args:
            config: the call's config.
            replicas: the replicas in sync (1 without a strategy).

        Returns:
            ``config`` (the default), or a copy whose stage settings are split among the replicas as the global
            batch is (bucketing's per-bucket batch sizes).

        Raises:
            ConfigError: when the stage's settings do not split among the replicas.
        """
        return config

    def padded(self, config: LoaderConfig) -> list[str] | None:
        """The tensors whose padding preview measures on the batches shown.

        Args:
            config: the config.

        Returns:
            Their names (packing's packed tensors, segmenting's segmented ones); None (the default) for the
            padded tensors, as bench measures them.
        """
        return None

    def counter(self, config: LoaderConfig):
        """A fresh running count of what the stage does (see input_fn's reports), or None.

        Args:
            config: the config.

        Returns:
            The count, made once per ``build_input_fn`` (none under a ``service`` block) and handed to
            :meth:`apply` as ``Build.report``: its ``add`` counts the stage's elements as the dataset runs,
            its ``report()`` is what ``InputFn.report()`` returns. None (the default) when the stage keeps
            no count.
        """
        return None

    def apply(self, build: Build) -> "tf.data.Dataset":
        """Make the model's batches of the loader's: every stage implements it, importing the graph code it runs.

        Args:
            build: what the ``input_fn()`` call hands the stage.

        Returns:
            The dataset of the model's batches, each as ``build.model_batch`` packs it.
        """
        raise NotImplementedError

    def padding_dataset(self, config: LoaderConfig, batch_size: int, names: list[str]) -> "tf.data.Dataset | None":
        """The stage's batches as bench and preview measure them.

        Args:
            config: the config.
            batch_size: the batch size.
            names: the tensors to measure (bench's padded tensors).

        Returns:
            The batches in order, each reduced to the real and padded elements of every tensor of ``names``
            ({"real": {...}, "padded": {...}}, with "examples" when the stage's examples are the loader's);
            None (the default) when the loader's own batches are measured (their padding is the model's, or
            :meth:`bench_lines` and :meth:`shown_padding` measure the stage's rows).
        """
        return None

    def bench_lines(self, config: LoaderConfig, batch_size: int, batches: int) -> list[str] | None:
        """bench's lines on the padding of the rows the stage fills.

        Args:
            config: the config.
            batch_size: the batch size.
            batches: how many batches bench timed: the rows that make them are measured.

        Returns:
            The lines; None (the default) when bench reports the padding efficiency of the padded tensors.
        """
        return None

    def shown_padding(self, config: LoaderConfig, shown: list[dict]) -> ShownPadding | None:
        """preview's padding measured on the batches it shows.

        Args:
            config: the config.
            shown: the batches shown, each its tensors by name; the :meth:`padded` ones are measured.

        Returns:
            The padding; None (the default) when preview measures a second pass over
            :meth:`padding_dataset`'s (or the loader's) batches.
        """
        return None

    def drawn_lengths(self, config: LoaderConfig, shown: list[dict]) -> tuple[str | None, tuple | None] | None:
        """What ``preview --plot`` draws of the batches it shows.

        Args:
            config: the config.
            shown: the batches shown, each its tensors by name.

        Returns:
            (tensor, (each row's real length per batch, each batch's width)), the second None when there is
            no tensor to draw; None (the default) to draw the first tensor whose first axis varies.
        """
        return None

    def batch_shapes(self, config: LoaderConfig, outputs: list) -> tuple[list | None, str] | None:
        """The batch shapes the stage fixes, for describe (a jitted step compiles once per shape).

        Args:
            config: the config.
            outputs: describe's outputs of the signature, each with ``name`` and ``shape`` (batch axis first);
                every one dense.

        Returns:
            (every batch shape, why there are that many), or (None, why they vary); None (the default) when
            the shapes are the loader's batches', which describe works out itself.
        """
        return None

    def lines(self, config: LoaderConfig) -> list[str]:
        """What ``describe`` says of the stage.

        Args:
            config: the config.

        Returns:
            The lines; none by default.
        """
        return []

    def as_json(self, config: LoaderConfig) -> dict | None:
        """The stage's block in ``describe --json``.

        Args:
            config: the config.

        Returns:
            The block's values; None (the default) for plain batching.
        """
        return None

    def report(self, counter, kind: type | None = None):
        """What ``counter`` (this stage's :meth:`counter`) counted so far.

        Args:
            counter: the stage's running count, or None (none kept).
            kind: a report class (chunking.ChunkReport ...): None unless the stage's report is one.

        Returns:
            The report, or None.
        """
        found = counter.report() if counter is not None else None
        return found if kind is None or isinstance(found, kind) else None


def register(stage: type[Stage]) -> type[Stage]:
    """Class decorator: make ``stage`` the stage of configs whose regroup spec names it, and its block
    (``args.<name>``) one the config check and the schemas know.

    Args:
        stage: the Stage subclass.

    Returns:
        ``stage`` itself.

    Raises:
        ValueError: a stage of that name is registered already, or ``stage.phase`` is none of PHASES.
    """
    if stage.name in STAGES:
        raise ValueError(f"regroup stage {stage.name!r} is registered twice")
    if stage.phase not in PHASES:
        raise ValueError(f"regroup stage {stage.name!r} has phase {stage.phase!r}: expected one of "
                         f"{', '.join(PHASES)}")
    STAGES[stage.name] = stage()
    return stage


def of(config: LoaderConfig) -> Stage:
    """The stage that makes ``config``'s batches."""
    name = PLAIN if config.regroup is None else config.regroup.stage
    try:
        return STAGES[name]
    except KeyError:
        raise ValueError(f"no regroup stage is registered as {name!r}{suggest(name, STAGES)}") from None


def shown(info) -> str:
    """A tensor's static description as describe prints it: 'int64 [?, 2]', '?' when unknown."""
    return "?" if info is None else f"{info.dtype} {format_shape(info.shape)}"


def names() -> tuple[str, ...]:
    """Every registered stage but plain batching, in registration order (the config's regroup blocks)."""
    return tuple(name for name in STAGES if name != PLAIN)
