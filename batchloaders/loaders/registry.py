"""Loader types by name, and the contract a loader keeps (:class:`Loader`).

loaders/__init__.py registers the built-in loaders; this module knows none of them. A loader registers
with its kind (config/kinds.py: what its type means to the config check, block sizes, sharding,
describe), and the kinds table is where the config layer, the schema's ``type`` enum and the command
line read the names from: every loader type name comes from a registration or a row that one checks.
"""
from __future__ import annotations

from typing import Any, Callable

from batchloaders.config import kinds
from batchloaders.config.kinds import LoaderKind
from batchloaders.errors import ConfigError, Problem
from batchloaders.core.model import LoaderConfig


class Loader:
    """What every loader does, and what some can do: a capability's method runs only where its flag says so.

    Every loader has a ``kind`` (a config.kinds.LoaderKind naming its type) and ``batches``. The capabilities
    have defaults: ``source`` gives ``batches`` with the identity as its decoder; ``zero_tails`` names no
    tensor; ``global_order`` as its kind says (``shuffle_scope: global`` needs ``units_per_file``); ``reads_records``
    False (a mixture draws records before parsing only from a loader with ``records``).

    Example::

        class Reversed(Loader):
            kind = LoaderKind("reversed", sequence=False, concatenates_records=False, example="record",
                              example_is="the record", args_schema="independent_args.schema.json")

            def batches(self, config, shard, batch_size, reader):
                ...

        registry.register(Reversed())
    """

    kind: LoaderKind | None = None
    reads_records: bool = False  # one example per record, read before parsing: records

    @property
    def name(self) -> str:
        """The loader type's name (its kind's)."""
        return self.kind.name

    @property
    def global_order(self) -> bool:
        """Whether it counts an epoch's examples for a global shuffle (``units_per_file``): its kind says, so that
        the config check, which knows kinds and not loaders, refuses ``shuffle_scope: global`` otherwise."""
        return isinstance(self.kind, LoaderKind) and self.kind.global_order

    def batches(self, config: LoaderConfig, shard, batch_size: int, reader):
        """Parsed blocks of examples.

        Args:
            config: the checked config (or one source's, in a mixture).
            shard: this input pipeline's read.sharding.Shard.
            batch_size: examples per block.
            reader: the config's read.integrity.Reader.

        Returns:
            A tf.data.Dataset of ``{"values", "lengths", "extras"}`` dicts, each a block of examples.
        """
        raise NotImplementedError  # (register refuses a loader without its own)

    def source(self, config: LoaderConfig, shard, batch_size: int, reader, finish=None) -> tuple[Any, Callable]:
        """(elements, decode): the blocks the compiler's one map stage decodes, for a loader that defers work
        into it (the independent loader defers parsing).

        Args:
            config: as for :meth:`batches`.
            shard: as for :meth:`batches`.
            batch_size: as for :meth:`batches`.
            reader: as for :meth:`batches`.
            finish: loaders/base.finisher's function, offered when it acts on each example alone; a loader that
                runs it on its blocks itself returns ``decode`` None.

        Returns:
            (a tf.data.Dataset, the function turning one element into a block dict, or None).
        """
        return self.batches(config, shard, batch_size, reader), _same

    def zero_tails(self, config: LoaderConfig) -> frozenset:
        """The tensors this loader gives zero-padded to the block's longest example already (padding skips them).

        Args:
            config: the checked config.

        Returns:
            Their names; none by default.
        """
        return frozenset()

    def global_units(self, config: LoaderConfig, counts) -> int:
        """Examples (records or windows) of a global shuffle's epoch: the sum of :meth:`units_per_file`.

        Args:
            config: the checked config.
            counts: the record count of each indexed file, in the config's file order.

        Returns:
            The examples of one epoch.

        Raises:
            ConfigError: for a loader without ``global_order``.
        """
        return int(sum(int(u) for u in self.units_per_file(config, counts)))

    def units_per_file(self, config: LoaderConfig, counts):
        """Examples (records or windows) of a global shuffle's epoch in each file, from its record count (a window
        of files permutes the examples of its files: read/global_order.py).

        Args:
            config: the checked config.
            counts: the record count of each indexed file, in the config's file order.

        Returns:
            A NumPy int64 array: the examples of each file.

        Raises:
            ConfigError: for a loader without ``global_order``.
        """
        raise ConfigError(Problem(config.source, "$.args.shuffle_scope", (
            f"found global, but the {self.name} loader has no global order; expected shuffle_scope file")))

    def records(self, config: LoaderConfig, shard, batch_size: int, reader) -> tuple[Any, Callable]:
        """Blocks of serialized records, for a loader that ``reads_records`` (a mixture draws from them).

        Args:
            config: as for :meth:`batches`.
            shard: as for :meth:`batches`.
            batch_size: records per block.
            reader: as for :meth:`batches`.

        Returns:
            (a tf.data.Dataset of ``{"serialized", "file", "record"}`` blocks, the function parsing one).
        """
        raise NotImplementedError  # (register refuses reads_records without its own)


def _same(element):
    return element


LOADERS: dict[str, Loader] = {}
# Capability flag -> the method it needs.
_NEEDS = {"global_order": "units_per_file", "reads_records": "records"}


def missing(loader) -> list[str]:
    """What ``loader`` lacks of the contract: each entry names a method or attribute."""
    if not isinstance(loader, Loader):
        return [f"Loader (found {type(loader).__name__}, expected an instance of loaders.registry.Loader)"]
    out = [] if isinstance(loader.kind, LoaderKind) else ["kind (a config.kinds.LoaderKind)"]
    if type(loader).batches is Loader.batches:
        out.append("batches(config, shard, batch_size, reader)")
    out += [f"{method} (it sets {flag})" for flag, method in _NEEDS.items()
            if getattr(loader, flag) and getattr(type(loader), method) is getattr(Loader, method)]
    return out


def register(loader: Loader) -> Loader:
    """Make ``loader`` read configs of its kind's type, and the config check admit that type.

    Args:
        loader: a Loader instance.

    Returns:
        ``loader``.

    Raises:
        TypeError: when it lacks part of the contract (the message names each part).
        ValueError: for a type registered twice, or a kind unlike the kinds table's row of that name.
    """
    lacking = missing(loader)
    if lacking:
        raise TypeError(f"loader {type(loader).__name__} cannot be registered: it lacks {'; '.join(lacking)}")
    if loader.name in LOADERS:
        raise ValueError(f"loader type {loader.name!r} is registered twice")
    kinds.add(loader.kind)
    LOADERS[loader.name] = loader
    return loader


def of(config: LoaderConfig) -> Loader:
    """The loader that reads ``config``'s examples.

    Raises:
        ValueError: when no loader is registered as its type.
    """
    try:
        return LOADERS[config.type]
    except KeyError:
        raise ValueError(kinds.unknown(config.type)) from None


def unregister(name: str) -> None:
    """Forget the loader type ``name`` and its kind (tests register throwaway loaders)."""
    LOADERS.pop(name, None)
    kinds.drop(name)
