"""The regroup stages as the config check knows them: the one registry of stages, and what the check
asks of each (when its block is checked and how, what it needs of the padding list, its schema).

The registry lives here, in the config layer, because the config check is the lowest layer that asks it;
``regroup/stage.py``'s ``Stage`` extends :class:`StageRules` with how a stage makes its batches, and its
``register`` enters a stage here. A stage's block is one key of ``args``, named as the stage.
"""
from __future__ import annotations

from typing import ClassVar

# ``ctx`` below is config/sections/context.py's SectionContext, named only in annotations: that module asks this
# registry (the tensors a stage reads for itself), so importing it here would make a cycle.

# When a stage's block is checked, in the order of config.config_from_document's sections:
AFTER_STEPS = "after steps"  # it reshapes the tensors the processing steps made (chunking, segmenting)
BEFORE_MODEL = "before model"  # it makes tensors the model names (packing's segment ids), checked next
AFTER_PADDING = "after padding"  # it pads tensors itself, which must agree with the padding list (bucketing)
PHASES = (AFTER_STEPS, BEFORE_MODEL, AFTER_PADDING)


class StageRules:
    """What the config check asks of a regroup stage. Subclasses (through regroup/stage.py's ``Stage``) set
    ``name``, ``schema`` and ``regroups``, and override :meth:`check`.

    Attributes:
        name: the stage's name: the key of its block in ``args``, and the ``stage`` of its spec.
        phase: when its block is checked, one of PHASES: AFTER_STEPS (it reshapes the tensors the processing
            steps made), BEFORE_MODEL (it makes tensors the model names) or AFTER_PADDING (it pads tensors
            itself, which must agree with the padding list).
        schema: the block's JSON schema: a file name of schemas/ (the built-in stages, which editors read) or
            the schema itself; None for a stage without a block (plain batching).
        description: the block's description in the loaders' args schemas.
        regroups: what the stage does, for the message when two regroup blocks are given.
        makes_examples: whether the stage makes examples of its own out of the loader's (chunks): then
            ``target_batch_size`` counts them (the manifest's counts tell no batches), they carry no window
            axis, a secondary feature that describes a chunk has them to describe, and bench measures the
            stage's padding, not the loader's.
        file_unshardable: whether TensorFlow's ``file`` sharding of a service block cannot trace the stage's
            pipeline back to the list of data files (the worker would fail at its first batch).
        keeps_file_order: whether the stage works on each sequence's records in file order (which a global
            shuffle takes apart).
        unmixable: why the stage cannot work on a mixture of sources ("" when it can).
        fingerprinted: whether checkpoints name the stage's block even when another stage (or none) makes
            the batches (a null part): the stages checkpoints were written with before others registered.
    """

    name: ClassVar[str]
    phase: ClassVar[str] = AFTER_STEPS
    schema: ClassVar[str | dict | None] = None
    description: ClassVar[str] = ""
    regroups: ClassVar[str] = "regroups examples its own way"
    makes_examples: ClassVar[bool] = False
    file_unshardable: ClassVar[bool] = False
    keeps_file_order: ClassVar[bool] = False
    unmixable: ClassVar[str] = ""
    fingerprinted: ClassVar[bool] = False

    def check(self, ctx: "SectionContext", block: dict, *, alone: bool):
        """Check the stage's block against the tensors the config makes so far.

        Args:
            ctx: the config check so far; the stage reports through ``ctx.check`` and leaves the tensors it
                changes or makes in ``ctx.tensors`` and ``ctx.seen``.
            block: the block as written, valid against the stage's schema.
            alone: False when another regroup block is given too (reported already): the config is refused, so
                the stage reports what else it can and returns None, leaving ``ctx.tensors`` as they are.

        Returns:
            The stage's spec (a frozen dataclass with ``stage`` = the stage's name and ``json_path``, see
            core/model.py's RegroupSpec), or None after reporting.
        """
        raise NotImplementedError

    def check_batching(self, ctx: "SectionContext", spec) -> None:
        """Once the padding list is checked: report a tensor whose batching the stage cannot make (packed
        rows and segments are cut to a fixed length). Nothing by default.

        Args:
            ctx: the config check so far, its padding list checked; the stage reports through ``ctx.check``.
            spec: what :meth:`check` returned for the block (called only when that was not None).
        """

    def primary_extra(self, spec) -> tuple:
        """PrimaryFeatures the stage reads besides the config's (segmenting's manifest key): none by default.

        Args:
            spec: what :meth:`check` returned for the block (called only when that was not None).

        Returns:
            The PrimaryFeatures, added to the config's own (the features its records are parsed for).
        """
        return ()

    def unfed(self, block: dict) -> tuple[str, ...]:
        """Tensors the stage reads that the model need not take (segmenting's key, which names the sequences).

        Args:
            block: the block as written, valid against the stage's schema.

        Returns:
            Their names: none by default.
        """
        return ()

    def chunk_widths(self, spec) -> dict[str, int]:
        """The tensors the stage cuts into examples of their own, each with the steps a piece holds.

        Args:
            spec: what :meth:`check` returned for the block.

        Returns:
            {tensor: steps per piece}: empty by default (the stage cuts nothing).
        """
        return {}

    def check_held(self, ctx: "SectionContext", block: dict, per_example: int) -> None:
        """Report a buffer of the stage's that cannot fit in memory. Nothing by default.

        Args:
            ctx: the config check so far; the stage reports through ``ctx.check``.
            block: the block as written (schema-valid or not: check its types).
            per_example: the bytes of one example, at least.
        """

    def draws_at_random(self, spec) -> bool:
        """Whether the stage draws anything at random (a shuffle of its own).

        Args:
            spec: the config's regroup spec, this stage's.

        Returns:
            False by default.
        """
        return False

    def excluded(self, other: "StageRules") -> str:
        """The message at this stage's block when ``other``'s block is given too.

        Args:
            other: a stage registered before this one whose block the config gives as well.

        Returns:
            The message, naming both stages and what each does (their ``regroups``).
        """
        return (f"found {self.name} and {other.name} together: expected one ({self.name} {self.regroups}; "
                f"{other.name} {other.regroups})")


STAGES: dict[str, StageRules] = {}


def blocks() -> list[StageRules]:
    """Every registered stage that has a block in ``args`` (plain batching has none), in registration order."""
    return [stage for stage in STAGES.values() if stage.schema is not None]


def flagged(flag: str) -> list[StageRules]:
    """Every registered stage with a block whose attribute ``flag`` is true, in registration order.

    Args:
        flag: a StageRules attribute (``keeps_file_order``, ``makes_examples`` ...).

    Returns:
        The stages.
    """
    return [stage for stage in blocks() if getattr(stage, flag)]


def given(args: dict, flag: str) -> list[StageRules]:
    """The stages of :func:`flagged` whose block ``args`` holds (as written, valid or not).

    Args:
        args: the loader's ``args`` as written.
        flag: a StageRules attribute.

    Returns:
        The stages, in registration order.
    """
    return [stage for stage in flagged(flag) if stage.name in args]


def of_spec(spec) -> StageRules | None:
    """The registered stage of a regroup spec (its ``stage``), or None for no spec.

    Args:
        spec: a LoaderConfig's ``regroup``.

    Returns:
        The stage; None when ``spec`` is None.

    Raises:
        KeyError: no stage of that name is registered.
    """
    return None if spec is None else STAGES[spec.stage]


def version() -> tuple:
    """Changes when a stage registers or leaves (a cache key of the generated schemas)."""
    return tuple((name, id(type(stage))) for name, stage in STAGES.items())
