"""``StateSaver``: per-slot states carried from one segment of a sequence to the next (truncated BPTT).

With ``segmenting``, batch slot j carries consecutive segments of one sequence in consecutive
batches (see segmenting.py). A StateSaver keeps one value per slot and per named state in
variables: ``state(name, features)`` gives the saved values, with the slots whose segment is the
first of its sequence (``is_first``) reset to the initial value; ``save_state(name, value,
features)`` stores the values the next segment of each slot starts from. It mirrors the TF1
``NextQueuedSequenceBatch.state`` / ``save_state`` pair, works eagerly and inside ``tf.function``
(a Keras ``train_step`` included), and its variables go into a ``tf.train.Checkpoint`` with it.
"""
from __future__ import annotations

import operator
from typing import Any, Mapping

import tensorflow as tf

from batchloaders.errors import ConfigError, Problem


def _error(path: str, message: str) -> ConfigError:
    """A mistake in using the StateSaver (not in a file): located at <StateSaver> and an argument's path."""
    return ConfigError(Problem("<StateSaver>", path, message))


class StateSaver(tf.Module):
    """Named per-slot states for a batch of ``batch_size`` slots (lanes).

    Every slot starts at its initial value and returns there at the first segment of each new sequence.

    Example:
        >>> saver = StateSaver({"h": tf.zeros([16]), "c": tf.zeros([16])}, batch_size=32)
        >>> h, c = saver.state("h", features), saver.state("c", features)
        >>> outputs, h, c = lstm(features["x"], initial_state=[h, c])
        >>> saver.save_state("h", h, features); saver.save_state("c", c, features)

    Args:
        initial_states: each state's name -> one slot's initial value (no batch axis, a fully defined shape), as
            in the reference ``batch_sequences_with_states``.
        batch_size: the slots: the config's lanes (``segmenting.batch_size`` or ``target_batch_size``).
        prefix: the segmenting block's counter prefix.
        name: the ``tf.Module``'s name.

    Raises:
        ConfigError: ``batch_size`` is not a positive integer; no initial state, or one whose shape is not fully
            defined.
    """

    def __init__(self, initial_states: Mapping[str, Any], batch_size: int, *, prefix: str = "",
                 name: str | None = None):
        super().__init__(name=name)
        try:
            lanes = None if isinstance(batch_size, bool) else operator.index(batch_size)  # numpy's ints too
        except TypeError:
            lanes = None
        if lanes is None or lanes < 1:
            raise _error("$.batch_size", f"found batch_size {batch_size!r}: expected a positive integer (the number "
                                         "of slots)")
        if not initial_states:
            raise _error("$.initial_states", "found no initial state: expected a dict {name: one slot's initial value}")
        self.batch_size = lanes
        self.prefix = prefix
        self._initial = {}
        self._saved = {}
        with self.name_scope:
            for state_name, value in initial_states.items():
                value = tf.convert_to_tensor(value)
                if not value.shape.is_fully_defined():
                    raise _error(f"$.initial_states.{state_name}", f"initial state {state_name!r} has shape "
                                 f"{value.shape}: expected a fully defined shape (one slot's value, no batch axis)")
                self._initial[state_name] = value
                self._saved[state_name] = tf.Variable(self._batch_of(value), trainable=False,
                                                      name=str(state_name).replace("/", "_"))

    def _batch_of(self, value: tf.Tensor) -> tf.Tensor:
        return tf.tile(value[None], [self.batch_size] + [1] * value.shape.rank)

    def _variable(self, name: str) -> tf.Variable:
        if name not in self._saved:
            raise _error("$.name", f"unknown state {name!r}: expected one of {', '.join(map(repr, self._saved))} "
                                   "(the names of initial_states)")
        return self._saved[name]

    def _counter(self, features: Mapping[str, tf.Tensor], counter: str) -> tf.Tensor:
        name = self.prefix + counter
        if name not in features:
            raise _error("$.features", f"the features hold no {name!r}: expected the segment counters of a "
                                       f"segmenting config (found {', '.join(map(repr, features))}; is the StateSaver's "
                                       f"prefix {self.prefix!r} the config's segmenting.prefix?)")
        return features[name]

    def _slots(self, features: Mapping[str, tf.Tensor]) -> tf.Tensor:
        slot = features.get(self.prefix + "slot")
        if slot is None:  # a full batch in slot order
            return tf.range(tf.shape(self._counter(features, "is_first"))[0])
        slot = tf.cast(slot, tf.int32)
        check = tf.debugging.assert_less(slot, self.batch_size, message=(
            f"a slot beyond the StateSaver's batch_size {self.batch_size}: expected batch_size equal to the "
            "config's lanes (segmenting.batch_size or target_batch_size)"))
        with tf.control_dependencies([check]):
            return tf.identity(slot)

    def state(self, name: str, features: Mapping[str, tf.Tensor]) -> tf.Tensor:
        """The saved state ``name`` of each row's slot; rows whose ``is_first`` is true get the initial value instead.

        Args:
            name: the state, one of ``initial_states``'s names.
            features: the batch's features dict (its ``is_first`` and ``slot`` counters are read).

        Returns:
            The states ``[rows, ...]``.

        Raises:
            ConfigError: ``name`` is not a state's name, or ``features`` holds no ``is_first`` counter.
        """
        variable = self._variable(name)
        saved = tf.gather(variable, self._slots(features))
        first = tf.cast(self._counter(features, "is_first"), tf.bool)
        first = tf.reshape(first, tf.concat([tf.shape(first), tf.ones([variable.shape.rank - 1], tf.int32)], 0))
        return tf.where(first, tf.cast(self._initial[name], variable.dtype)[None], saved)

    def save_state(self, name: str, value, features: Mapping[str, tf.Tensor] | None = None):
        """Store ``value`` as the state ``name`` the next segment of each row's slot starts from.

        Args:
            name: the state, one of ``initial_states``'s names.
            value: the states ``[rows, ...]``, cast to the initial value's dtype.
            features: the batch's features dict: each row goes to its ``slot``. None: the rows are the whole
                batch in slot order (``batch_size`` rows, what segmenting gives without allow_small_batch).

        Returns:
            The assignment to the state's variable (an op inside ``tf.function``).

        Raises:
            ConfigError: ``name`` is not a state's name, or ``features`` holds neither a ``slot`` nor an
                ``is_first`` counter.
        """
        variable = self._variable(name)
        value = tf.cast(value, variable.dtype)
        if features is None:
            return variable.assign(value)
        return variable.scatter_nd_update(self._slots(features)[:, None], value)

    def reset(self) -> None:
        """Every slot back to its initial value (e.g. before evaluating)."""
        for name, variable in self._saved.items():
            variable.assign(self._batch_of(tf.cast(self._initial[name], variable.dtype)))

    @property
    def names(self) -> tuple[str, ...]:
        """The states' names, in ``initial_states``'s order."""
        return tuple(self._saved)
