"""The regroup stages as the config check knows them: the one registry of stages, and what the check
asks of each (when its block is checked and how, what it needs of the padding list, its schema).

The registry lives here, in the config layer, because the config check is the lowest layer that asks it;
``regroup/stage.py``'s ``Stage`` extends :class:`StageRules` with how a stage makes its batches, and its
``register`` enters a stage here. A stage's block is one key of ``args``, named as the stage.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:  # annotations only: the sections import this module
    from batchloaders.config.sections.context import SectionContext

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
    """

    name: ClassVar[str]
    phase: ClassVar[str] = AFTER_STEPS
    schema: ClassVar[str | dict | None] = None
    description: ClassVar[str] = ""
    regroups: ClassVar[str] = "regroups examples its own way"

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
            spec/model.py's RegroupSpec), or None after reporting.
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


def version() -> tuple:
    """Changes when a stage registers or leaves (a cache key of the generated schemas)."""
    return tuple((name, id(type(stage))) for name, stage in STAGES.items())
