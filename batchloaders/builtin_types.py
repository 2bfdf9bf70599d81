"""The built-in secondary feature types and processing steps.

They register the way any other module would: importing ``batchloaders.secondary``
and ``batchloaders.steps`` runs each type's ``register`` call. The registries
(``registry.py``) know nothing of what registers into them; code that looks a
type up by name calls :func:`load` first.
"""
from __future__ import annotations


def load() -> None:
    """Import the modules that register the built-in types (idempotent: a module is imported once)."""
    from batchloaders import secondary, steps  # noqa: F401  (importing registers)
