"""The built-in secondary feature types and processing steps.

They register the way any other module would: importing ``batchloaders.transform.secondary``
and ``batchloaders.transform.steps`` runs each type's ``register`` call. The registries
(``registry.py``) know nothing of what registers into them; code that looks a
type up by name calls :func:`load` first.
"""
from __future__ import annotations


def load() -> None:
    """Import the modules that register the built-in types (idempotent: a module is imported once)."""
    from batchloaders.transform import secondary, steps  # deferred: jsonschema loads only when a type is looked up
