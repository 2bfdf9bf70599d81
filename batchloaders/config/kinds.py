"""The loader types, each as a kind: what the type means to the code that is not the loader itself.

The one table keyed by loader type name outside loaders/: checks, block sizes, sharding, accounting,
describe and bench ask ``kind(config.type)`` instead of comparing names, so a new loader type is a
row here and a module in loaders/.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class LoaderKind:
    """What a loader type means to the code that is not the loader itself: checks, block sizes, sharding,
    accounting, describe and bench ask it instead of comparing type names."""

    name: str
    sequence: bool  # examples are windows of several records (or steps), sized by min_window and max_window
    concatenates_records: bool  # records are joined along one time axis: windows count steps, stride applies
    example: str  # what one example is called: "record" or "window"
    example_is: str  # what one example is, said of a record where an error names one

    @property
    def stacks_record_rows(self) -> bool:
        """A window stacks one row per record for each context feature (its first axis counts records)."""
        return self.sequence and not self.concatenates_records

    @property
    def window_unit(self) -> str | None:
        """What a window's length counts; None for a loader without windows."""
        return None if not self.sequence else ("steps" if self.concatenates_records else "records")


KINDS = {kind.name: kind for kind in (
    LoaderKind("independent", sequence=False, concatenates_records=False, example="record",
               example_is="the record"),
    LoaderKind("continuous_sequence", sequence=True, concatenates_records=True, example="window",
               example_is="the window whose first step is in this record"),
    LoaderKind("discrete_sequence", sequence=True, concatenates_records=False, example="window",
               example_is="the window starting at this record"),
)}


def kind(loader_type: str) -> LoaderKind:
    """The kind of a checked config's ``type`` (the schema admits only these names)."""
    return KINDS[loader_type]
