"""``ResumableIterator``: the batches of an ``input_fn``, their position saved by ``tf.train.Checkpoint``.

Two modes (the config's ``resume``, or ``mode=``; left out, ``replay`` under a global shuffle, else ``state``):

* ``state``: the checkpoint holds the tf.data iterator's own state (shuffle buffers included), as
  ``tf.train.Checkpoint(iterator=iter(dataset))`` does, plus the fingerprint and the seed.
* ``replay``: the checkpoint holds the config's fingerprint, the seed and the count of batches
  consumed (bytes). A restore rebuilds the pipeline from that seed and skips that many batches:
  every draw is a function of the seed, the epoch and the draw's purpose (determinism.py), so the
  rebuilt pipeline gives the same batches, and the continuation is the uninterrupted run's.

Either way a checkpoint restored into a ResumableIterator of another config (or batch size, or input
pipeline) raises :class:`~batchloaders.errors.ResumeError` naming what differs, at the next batch.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
import os
import secrets
from typing import Any, Mapping

import tensorflow as tf

from batchloaders.config import stage_rules
from batchloaders.read import determinism, global_order
from batchloaders.core.model import UNLESS_EMPTY
from batchloaders.read import sharding
from batchloaders.read.proven import reads_proven
from batchloaders.errors import ConfigError, Problem, ResumeError

MODES = ("state", "replay")
_SETTINGS = "_settings"  # the fingerprint's key of what a ResumeError shows (no config field begins with _)
# Where a config was read from and where its parts were written do not change its batches.
_NOT_COMPARED = {"source", "json_path", "line", "column", "entry_lines", "list_file_line", "seed", "resume"}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.name not in _NOT_COMPARED and f.compare  # (compare=False: where, not what; DataFile.locate)
                and not (f.metadata == UNLESS_EMPTY and not getattr(value, f.name))}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def _regroup_parts() -> tuple[str, ...]:
    """The stages checkpoints name by their block, one part each, null unless it is the config's stage: the
    ``fingerprinted`` ones (the built-in stages), in registration order, so saved checkpoints still match."""
    return tuple(stage.name for stage in stage_rules.flagged("fingerprinted"))


def _ungrouped(config, plain: dict[str, Any]) -> dict[str, Any]:
    """``plain`` (the config's fields) with each group (reading, shuffling, window) in its settings, each a part
    named by its config key, so that a ResumeError names the key that differs. A group that is None (a loader
    without windows) gives None for each."""
    out = dict(plain)
    for field in dataclasses.fields(config):
        group = field.metadata.get("group")
        if group is not None:
            value = out.pop(field.name)
            out.update({s.metadata.get("key", s.name): None if value is None else value[s.name]
                        for s in dataclasses.fields(group)})
    return out


def _parts(config) -> dict[str, Any]:
    """The compiled config's parts as fingerprints name them."""
    out = _ungrouped(config, _plain(config))
    stage = config.regroup
    out.pop("regroup", None)
    parts = _regroup_parts()
    out.update({name: _plain(stage) if stage is not None and stage.stage == name else None for name in parts})
    if stage is not None and stage.stage not in parts:  # a stage registered besides the built-ins
        out[stage.stage] = _plain(stage)
    return out


def _short_hash(part: Any) -> str:
    return hashlib.sha256(json.dumps(part, sort_keys=True).encode()).hexdigest()[:16]


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


# What a position of a global shuffle's order does not depend on: it fits any batch size and number of pipelines.
_FREE_OF_POSITION = ("target_batch_size", "batch_size", "input_pipeline")


def fingerprint(config, batch_size: int, input_context=None, *, by_position: bool = False) -> dict[str, str]:
    """What fixes the batches, as {part: short hash or value}: every field of the compiled config (but its
    seed, which the checkpoint keeps on its own), the batch size and this input pipeline's share.
    ``by_position``: for a checkpoint of a global shuffle's position (a replay of a positional config), which
    fits any batch size and number of input pipelines: those are left out."""
    out = {name: _short_hash(part) for name, part in _parts(config).items()}
    if by_position:
        return {k: v for k, v in out.items() if k not in _FREE_OF_POSITION}
    out["batch_size"] = str(batch_size)
    if input_context is not None:
        out["input_pipeline"] = f"{input_context.input_pipeline_id} of {input_context.num_input_pipelines}"
    return out


def differences(saved: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    return sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))


def _files_shown(files: tuple[str, ...]) -> dict:
    """The data files as their common directory and their names under it (a few bytes a file)."""
    common = os.path.commonprefix([f.split("/")[:-1] for f in files]) if files else []
    root = "/".join(common)
    return {"root": root, "names": [f[len(root) + 1:] if root else f for f in files]}


def _dataset_shown(plain: Mapping[str, Any], config) -> dict:
    """Its single values as they are, its other parts (the manifest) by hash, its files by name."""
    return {**{k: v if _is_scalar(v) else {"sha256": _short_hash(v)} for k, v in plain.items() if k != "files"},
            "files": _files_shown(tuple(config.dataset.files))}


# Parts shown in more detail than their hash; the rest are shown when they are a single value.
_SHOWN = {"dataset": _dataset_shown}


def settings(config, batch_size: int, input_context=None, *, by_position: bool = False) -> dict[str, Any]:
    """What a ResumeError shows of fingerprint's parts (kept beside it, never compared): the single-valued
    settings as they are, the dataset's parts with its files by name (``by_position`` as for fingerprint)."""
    out = {}
    for name, part in _parts(config).items():
        if name in _SHOWN:
            out[name] = _SHOWN[name](part, config)
        elif _is_scalar(part) and not (by_position and name in _FREE_OF_POSITION):
            out[name] = part
    if by_position:
        return out
    out["batch_size"] = batch_size
    if input_context is not None:
        out["input_pipeline"] = f"{input_context.input_pipeline_id} of {input_context.num_input_pipelines}"
    return out


def _file_at(files: Mapping[str, Any], i: int) -> str:
    names = files["names"]
    if i >= len(names):
        return "none"
    return f"{files['root']}/{names[i]}" if files["root"] else names[i]


def _files_differ(saved: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    count = f"saved {len(saved['names'])} files, now {len(now['names'])}"
    first = next((i for i in range(max(len(saved["names"]), len(now["names"])))
                  if _file_at(saved, i) != _file_at(now, i)), None)
    if first is None:  # the same names, written another way (a checkpoint of another version)
        return f"dataset files: {count}, their names written another way"
    return f"dataset files: {count}; the first that differs is file {first + 1}: saved {_file_at(saved, first)}, " \
           f"now {_file_at(now, first)}"


def _dataset_differs(name: str, saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    out = []
    if saved.get("files") != now.get("files"):
        out.append(_files_differ(saved["files"], now["files"]))
    for k in differences({k: v for k, v in saved.items() if k != "files"},
                         {k: v for k, v in now.items() if k != "files"}):
        out += _value_differs(f"{name}.{k}", saved.get(k), now.get(k))
    return out


def _value_differs(name: str, saved: Any, now: Any) -> list[str]:
    if not (_is_scalar(saved) and _is_scalar(now)):  # known by hash only
        return [f"{name}: differs from the saved one"]
    return [f"{name}: saved {json.dumps(saved)}, now {json.dumps(now)}"]


# Parts described otherwise than by their value (_value_differs).
_DESCRIBE_DIFFERENCE = {"dataset": _dataset_differs}


def describe_differences(names: list[str], saved: Mapping[str, Any] | None, now: Mapping[str, Any]) -> list[str]:
    """One line per setting that differs, with its saved and current values where both are known."""
    out = []
    for name in names:
        if saved is None:
            out.append(f"{name}: differs (the checkpoint keeps no values of its settings: an earlier version "
                       "of batchloaders saved it)")
        elif name == READ:
            out.append(_read_differs(saved, now))
        elif name in saved and name in now:
            out += _DESCRIBE_DIFFERENCE.get(name, _value_differs)(name, saved[name], now[name])
        else:
            out.append(f"{name}: differs from the saved one")
    return out


# The part of a tf.data iterator state's identity that says how the data files are read: present only when
# some source's files are read on the proven path (read/proven.py), so that checkpoints of the accounting path
# (and those saved before the proven path existed) keep matching; its graph holds other stages, which a
# saved state of the other path does not fit.
READ = "read"


def read_path(config) -> dict[str, str]:
    """``{READ: how each source's files are read}`` when some are read on the proven path, else nothing: a
    part of the identity of a tf.data iterator's state (not of a replay's, which keeps no state)."""
    ways = ["proven" if reads_proven(one) else "accounted" for one in
            [config.of_source(s) for s in config.sources] or [config]]
    return {READ: ", ".join(ways)} if "proven" in ways else {}


def _read_differs(saved: Mapping[str, Any] | None, now: Mapping[str, Any]) -> str:
    saved_way, now_way = (saved or {}).get(READ, "accounted"), now.get(READ, "accounted")
    return (f"{READ}: saved {saved_way}, now {now_way}: the pipeline reads the data files another way than the one "
            "that saved the checkpoint (proven: each file's size checked against the manifest's size_bytes, under "
            "on_corrupt fail with every size listed, in this version; accounted: the per-block end-of-file "
            "accounting, also every earlier version's), and a tf.data iterator's saved state fits only the "
            "pipeline it was saved from; expected a checkpoint saved by this version with this manifest and "
            "on_corrupt, or resume: replay (which keeps no iterator state and fits either way)")


def identity(config, batch_size: int, input_context=None, *, with_seed: bool = False) -> dict[str, Any]:
    """What a checkpoint keeps to tell whether it fits a pipeline: the fingerprint (with :func:`read_path`: a
    tf.data iterator's state), and the settings a ResumeError shows (never compared). ``with_seed``: the seed
    too, for a checkpoint of the dataset's own iterator (ResumableIterator keeps the seed apart and rebuilds
    the pipeline from it)."""
    out = {**fingerprint(config, batch_size, input_context), **read_path(config),
           _SETTINGS: {**settings(config, batch_size, input_context), **read_path(config)}}
    if with_seed:
        out["seed"] = json.dumps(config.seed)
        out[_SETTINGS]["seed"] = config.seed
    return out


def mismatch(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What a ResumeError says when ``saved`` (an identity, its settings possibly missing) is not ``current``'s."""
    saved, current = dict(saved), dict(current)
    shown, now = saved.pop(_SETTINGS, None), current.pop(_SETTINGS)
    differ = differences(saved, current)
    if not differ:
        return []
    return [f"the checkpoint was saved by a pipeline whose {', '.join(differ)} differ(s) from this one's: expected "
            "the config (and batch size, input pipeline) it was saved with", *describe_differences(differ, shown, now)]


def _checked_mode(config, input_fn, mode: str | None) -> str:
    """``mode``, or the config's ``resume``; a ConfigError when it is none of MODES or the config cannot resume."""
    if config is None:
        raise ConfigError(Problem("<ResumableIterator>", "$.input_fn", (
            f"found {type(input_fn).__name__}: expected the input_fn build_input_fn returns")))
    mode = mode if mode is not None else config.resume
    if mode not in MODES:
        raise ConfigError(Problem("<ResumableIterator>", "$.mode", f"found {mode!r}: expected one of {MODES}"))
    if config.service is not None:
        raise ConfigError(Problem(config.source, "$.args.service", (
            "ResumableIterator over a pipeline that runs on a tf.data service: the batches come in the order the "
            "workers answer, which no run repeats, and the service's iterators cannot be saved; expected a "
            "config without a service block (resume the trainer's own pipeline), or no ResumableIterator")))
    if mode == "replay" and config.reading.sloppy_interleave:
        raise ConfigError(Problem(config.source, "$.args.resume", (
            "resume is replay and sloppy_interleave is true: a replay skips the batches consumed, which "
            "needs them in the same order every run; expected sloppy_interleave false, or resume state")))
    return mode


class ResumableIterator(tf.Module):
    """A Python iterator over ``input_fn``'s batches whose position ``tf.train.Checkpoint`` saves and restores.

    A config without a seed gets one drawn here, which the checkpoint keeps, so a restore goes on with the same
    draws. The checkpoint's position applies at the next batch, checked then, also in one that has given batches
    (in ``state`` mode, only a checkpoint of the seed its pipeline draws from). A checkpoint of another config
    (or batch size, or input pipeline) raises ResumeError naming what differs, at that next batch.

    Example:
        >>> batches = batchloaders.ResumableIterator(input_fn)
        >>> checkpoint = tf.train.Checkpoint(iterator=batches, model=model)
        >>> checkpoint.restore(tf.train.latest_checkpoint(directory))  # a fresh process: go on where it stopped
        >>> for features, targets in batches: ...

    Args:
        input_fn: what :func:`batchloaders.build_input_fn` returned.
        input_context: the ``tf.distribute.InputContext`` of this input pipeline, as ``input_fn`` takes it.
        params: ``input_fn``'s ``params`` (``batch_size``, ``seed``).
        mode: ``"state"`` or ``"replay"``. Default: the config's ``resume`` (``replay`` under a global shuffle,
            else ``state``).
        name: the ``tf.Module``'s name.

    Raises:
        ConfigError: ``input_fn`` is not one :func:`batchloaders.build_input_fn` returned; ``mode`` is none of
            the two; the config runs on a tf.data service, or is a replay with ``sloppy_interleave``; or a
            config without a seed is sharded by window over several input pipelines.
    """

    def __init__(self, input_fn, input_context=None, *, params: Mapping[str, Any] | None = None,
                 mode: str | None = None, name: str | None = None):
        super().__init__(name=name)
        config = getattr(input_fn, "config", None)
        self._mode_given = mode is not None  # (else the config's resume: a ResumeError then names that key)
        mode = _checked_mode(config, input_fn, mode)
        params = dict(params or {})
        batch_size = params.get("batch_size", config.target_batch_size)
        seed = determinism.seed_of(config.seed, params)
        if seed is None:
            # The seed drawn below is this process's own: input pipelines sharded by window must all draw
            # the same windows, from one seed (sharding.plan's ConfigError names it).
            for one in [config.of_source(s) for s in config.sources] or [config]:  # (a mixture: every source's)
                sharding.plan(one, input_context)
        self._fixed_seed = seed is not None  # a seed given: a checkpoint with another one is an error
        self._input_fn, self._input_context, self._params = input_fn, input_context, params
        self.mode = mode
        positional = global_order.positional(config)
        # A replay of a global shuffle keeps the position only, which fits any batch size; the tf.data
        # iterator's state (state mode) is that of the pipeline's batches.
        self._by_position = positional and mode == "replay"
        expected = fingerprint(config, batch_size, input_context, by_position=self._by_position)
        # A state checkpoint holds the tf.data iterator's state, which fits only a pipeline that reads the same way.
        read = read_path(config) if mode == "state" else {}
        expected.update(read)
        self._config_hash = _short_hash(expected)  # (before tf.Module wraps the dict)
        self._expected = expected
        shown = {**settings(config, batch_size, input_context, by_position=self._by_position), **read}
        self._settings = json.dumps(shown, sort_keys=True)  # (a string: tf.Module would wrap a dict to track it)
        # Small variables (a few hundred bytes and a few a data file): what the checkpoint compares, replays
        # from and shows in a ResumeError (_SETTINGS, never compared: older checkpoints lack it).
        self._own_fingerprint = json.dumps({"mode": mode, **self._expected, _SETTINGS: shown}, sort_keys=True)
        self._fingerprint = tf.Variable(self._own_fingerprint, trainable=False, name="fingerprint")
        self._seed = tf.Variable(seed if seed is not None else secrets.randbits(62), dtype=tf.int64,
                                 trainable=False, name="seed")
        self._consumed = tf.Variable(0, dtype=tf.int64, trainable=False, name="batches_consumed")
        self._running = _Running()  # not tracked: a checkpoint holds only what the mode says
        self._position = 0  # batches given by it: the variable differs after a restore
        # A global shuffle's checkpoint holds the position of the run's order consumed by all input pipelines
        # (global_order.py): a restore starts reading there, with any number of pipelines.
        pipelines = input_context.num_input_pipelines if input_context is not None else 1
        # Positions the input pipelines consume per batch each gives (a batch of one replica's share).
        self._step = sharding.per_replica_batch_size(config, batch_size, input_context,
                                                     from_params="batch_size" in params) * pipelines
        self._at = tf.Variable(0, dtype=tf.int64, trainable=False, name="position") if positional else None
        # The run's last position (None: endless): a short last batch ends the run there, not a step on.
        self._end = input_fn.run_positions() if positional else None

    def __iter__(self):
        return self

    def __next__(self):
        if self._running.batches is None or self._restored():
            self._start()
        batch = next(self._running.batches)  # (first: at the run's end StopIteration, whatever the count)
        consumed, at = self.advanced(self._position, self._running.at if self._at is not None else None, 1)
        self._position = consumed
        self._consumed.assign(consumed)
        if at is not None:
            self._running.at = at
            self._at.assign(at)
        return batch

    @property
    def batches_consumed(self) -> int:
        """The batches this iterator gave (after a restore: those the checkpoint's iterator gave)."""
        return int(self._consumed.numpy())

    @property
    def positions_per_batch(self) -> int | None:
        """Under a global shuffle, the positions of the run's order a batch of every input pipeline takes."""
        return self._step if self._at is not None else None

    def raw_batches(self):
        """The running pipeline's own iterator (started, or restarted after a restore, here), for a caller that
        counts the batches it takes and reports them with :meth:`count_given`: no variable is read or written
        per batch (about 0.3 ms a batch through ``next``).

        Returns:
            The tf.data iterator of the batches from the position saved.

        Raises:
            ResumeError: a checkpoint restored since does not fit this pipeline.
        """
        if self._running.batches is None or self._restored():
            self._start()
        return self._running.batches

    def count_given(self, batches: int) -> None:
        """Move the position on by ``batches`` more taken from :meth:`raw_batches`.

        Args:
            batches: the batches taken since the last report.

        Raises:
            ResumeError: the count would pass 2**63-1, the largest a checkpoint holds (an endless run).
        """
        self._position, at = self.advanced(self._position, self._running.at if self._at is not None else None,
                                           batches)
        self._consumed.assign(self._position)
        if at is not None:
            self._running.at = at
            self._at.assign(at)

    def advanced(self, consumed: int, position: int | None, batches: int) -> tuple[int, int | None]:
        """The count and position after ``batches`` more batches given from ``consumed`` and ``position``.

        Args:
            consumed: the batches given so far.
            position: under a global shuffle, the position of the run's order so far; else None.
            batches: the batches given since.

        Returns:
            (batches consumed, position): the position moves on by the positions a batch of every input
            pipeline takes, up to the run's end (a short last batch ends the run); None without a global shuffle.

        Raises:
            ResumeError: when a count would pass 2**63-1, the largest a checkpoint holds (an endless run).
        """
        after = (consumed + batches, None)
        if position is not None:
            moved = position + batches * self._step
            after = (after[0], moved if self._end is None else min(moved, self._end))
        for key, before, value in (("batches_consumed", consumed, after[0]), ("position", position, after[1])):
            if value is not None and value > determinism.MAX_SEED:
                raise ResumeError(Problem("<ResumableIterator>", f"$.{key}", (
                    f"found {before}: after {batches} more batch(es) it would be {value}, past "
                    f"{determinism.MAX_SEED} (2**63-1), the largest a checkpoint holds; the run is endless (epochs "
                    "null), so every position is in it, but none past that can be saved; expected a new run (a "
                    "fresh ResumableIterator) before it")))
        return after

    def get_state(self) -> dict[str, Any]:
        """The position in the data as a small JSON-serializable dict, for checkpointers other than
        ``tf.train.Checkpoint`` (Orbax, a Keras callback, a JSON file). :meth:`set_state` takes it back.

        Returns:
            ``{"format", "seed", "batches_consumed", "config"}``: the seed, the batches this iterator gave and the
            config's fingerprint; under a global shuffle also ``"position"``, the position of the run's order all
            input pipelines consumed.

        Raises:
            ResumeError: in ``state`` mode (replay is the default under ``shuffle_scope: global`` only), naming
                where that mode was asked for.
        """
        if self.mode != "replay":
            raise self._no_state_dict()
        state = {"format": STATE_FORMAT, "seed": int(self._seed.numpy()),
                 "batches_consumed": int(self._consumed.numpy()), "config": self._config_hash}
        if self._at is not None:
            state["position"] = int(self._at.numpy())
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Go on from ``state`` at the next batch.

        Args:
            state: what :meth:`get_state` gave, in this process or another.

        Raises:
            ResumeError: in ``state`` mode; or, naming the key, when ``state`` is not such a dict, was saved for
                another config, or lies past the end of this run (its length said).
        """
        self.get_state()  # (replay mode only)
        problems = _state_problems(state, positional=self._at is not None)
        if not problems:
            state = plain_state(state)
        if not problems and state["config"] != self._config_hash:
            problems = [("$.config", f"found {state['config']!r}, this pipeline's config is {self._config_hash!r}: "
                                     "the state was saved by a pipeline of another config (or, without a global "
                                     "shuffle, another batch size or input pipeline); expected a state of this one")]
        problems = problems or self._past_the_end(state)
        if problems:
            raise ResumeError([Problem("<state>", where, text) for where, text in problems])
        self._seed.assign(state["seed"])
        self._consumed.assign(state["batches_consumed"])
        if self._at is not None:
            self._at.assign(state["position"])

    def _no_state_dict(self) -> ResumeError:
        """What get_state says in state mode, naming where the mode was chosen."""
        config = self._input_fn.config
        where = ("<ResumableIterator>", "$.mode") if self._mode_given else (config.source, "$.args.resume")
        asked = "mode='state'" if self._mode_given else "resume: state in the config"
        text = (f"get_state in state mode ({asked}): that mode checkpoints the tf.data iterator's own state "
                "(megabytes for large shuffle buffers), which is no dict of numbers; ")
        if global_order.positional(config):
            text += ("under shuffle_scope global the position of the run's order is the whole state: expected no "
                     "resume key (its default there) or resume: replay")
        elif global_order.enabled(config):
            text += (f"under shuffle_scope global with {config.regroup.stage}, which fills its batches from the "
                     "examples as they come, a position does not fix the batches: expected resume: replay (a "
                     "restore then makes every batch since the run's start again)")
        else:
            text += "expected resume: replay in the config (or mode='replay')"
        return ResumeError(Problem(*where, text))

    def _past_the_end(self, state: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(JSON path, what is wrong) when ``state`` lies past the end of this run. An endless run has no end:
        every position is in it (the count's int64 bound is checked as batches are given)."""
        config = self._input_fn.config
        if self._at is not None:  # a position of the run's order: it fits any batch size
            if self._end is not None and state["position"] > self._end:
                epochs = config.epochs
                return [("$.position", f"found {state['position']}: past the end of this run, whose order holds "
                                       f"{self._end} positions ({epochs} epoch(s) of {self._end // epochs} "
                                       f"examples); expected at most {self._end} (the position after its last "
                                       "batch)")]
            return []
        end = self._input_fn.run_length(self._input_context, params={**self._params, "seed": state["seed"]})
        if end is not None and state["batches_consumed"] > end:  # (None: endless, or counted only as made)
            return [("$.batches_consumed", f"found {state['batches_consumed']}: past the end of this run, which "
                                           f"gives {end} batches (by the manifest's counts); expected at most "
                                           f"{end} (the count after its last batch)")]
        return []

    def _restored(self) -> bool:
        """Whether a checkpoint was restored since the running pipeline started: the count, the seed or the
        fingerprint differ from its own (a restore of another config with the same count changes only these)."""
        running = self._running
        return (int(self._consumed.numpy()) != self._position or int(self._seed.numpy()) != running.seed
                or self._fingerprint.numpy() != running.fingerprint
                or (self._at is not None and int(self._at.numpy()) != running.at))

    def _check(self) -> None:
        saved = json.loads(self._fingerprint.numpy().decode())
        problems = []
        saved_mode = saved.pop("mode", self.mode)
        # A state checkpoint of a global shuffle holds its position too, which is all a replay needs.
        positions = self._by_position and saved_mode == "state"
        if saved_mode != self.mode and not positions:
            problems.append(f"the checkpoint was saved in {saved_mode!r} mode, this iterator runs in "
                            f"{self.mode!r} mode: expected the same mode (the config's resume)")
        if self._by_position:
            saved = {k: v for k, v in saved.items() if k not in _FREE_OF_POSITION}
        problems += mismatch(saved, {**self._expected, _SETTINGS: json.loads(self._settings)})
        if problems:
            raise ResumeError([Problem("<checkpoint>", "$.iterator", p) for p in problems])
        if positions:  # what this iterator saves next is its own kind of checkpoint
            self._fingerprint.assign(self._own_fingerprint)

    def _restoring_from(self) -> str:
        """The path of the checkpoint whose iterator state waits for this one's tf.data iterator to be made."""
        for position in self._deferred_dependencies.get("iterator", ()):
            return position.checkpoint.save_path_string
        return "<checkpoint>"

    def _start(self) -> None:
        self._check()
        seed = int(self._seed.numpy())
        wanted = determinism.seed_of(self._input_fn.config.seed, self._params)
        if self._fixed_seed and seed != wanted:
            raise ResumeError(Problem("<checkpoint>", "$.iterator.seed", (
                f"the checkpoint was saved with seed {seed}, this pipeline's seed is {wanted}: expected the same "
                "seed")))
        if self.mode == "state" and self._running.batches is not None and seed != self._running.seed:
            raise ResumeError(Problem("<checkpoint>", "$.iterator.seed", (
                f"the checkpoint was saved with seed {seed}, restored into a ResumableIterator that has already given "
                f"batches drawn from seed {self._running.seed}: its pipeline cannot take the saved state; expected a "
                "restore into a ResumableIterator that has given no batch yet")))
        consumed = int(self._consumed.numpy())
        params = {**self._params, "seed": seed}
        if self.mode == "replay" and self._at is not None:
            # A global shuffle starts reading at the position consumed: nothing before it is read.
            self._running.at = int(self._at.numpy())
            self._running.batches = iter(self._input_fn(self._input_context, params=params,
                                                        start_position=self._running.at or None))
        elif self.mode == "replay":
            # The same seed gives the same batches: skip those consumed before the save (whole epochs unread
            # where the manifest's counts allow, input_fn's skip_batches).
            self._running.batches = iter(self._input_fn(self._input_context, params=params, skip_batches=consumed))
        elif self._running.batches is None:
            # Tracked from here on: a restore waiting for this dependency gives it the saved state now.
            dataset = self._input_fn(self._input_context, params=params)
            restoring_from = self._restoring_from()  # (tracking the iterator forgets it)
            try:  # (the saved state is read into the iterator as it is tracked)
                self.iterator = iter(dataset)
            except tf.errors.DataLossError as e:
                raise damaged(restoring_from, e, "$.iterator.iterator") from None
            except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError, tf.errors.FailedPreconditionError) as e:
                raise _unfit_state(e) from None
            self._running.batches = self.iterator
        # (state mode, restored into a running iterator: tf.train.Checkpoint restored its state in place)
        self._position = consumed
        self._running.seed, self._running.fingerprint = seed, self._fingerprint.numpy()


def _unfit_state(error: tf.errors.OpError) -> ResumeError:
    """The saved iterator state does not fit this pipeline though the config is the same: the pipeline is
    built differently (another version of batchloaders or TensorFlow compiled it)."""
    said = _first_line(error)
    return ResumeError(Problem("<checkpoint>", "$.iterator", (
        f"the saved iterator state does not fit this pipeline (TensorFlow: {said}); the config is the same, so "
        "the pipeline was built differently when it was saved (by another version of batchloaders or "
        "TensorFlow); expected a checkpoint saved by this version, or resume: replay in the config (a replay "
        "checkpoint keeps only the seed and the batches consumed, and fits every version that gives the same "
        "batches)")))


def _first_line(error: BaseException) -> str:
    said = (getattr(error, "message", None) or str(error)).strip().splitlines()[0]
    return said.split("}} ", 1)[-1]  # without TensorFlow's function-node prefix


# What is wrong with a checkpoint TensorFlow cannot read, by the error reading it gave (first match).
_DAMAGE = (
    (IndexError, "Read less bytes", "its data file (.data-*) holds fewer bytes than its index says: it was cut "
                                    "short (a save that was killed, or a copy not finished)"),
    (tf.errors.DataLossError, "", "its bytes are not those saved (a checksum does not match): it was damaged "
                                  "after the save"),
    (tf.errors.NotFoundError, "_BATCHLOADERS_IDENTITY not found", "its iterator was saved without the pipeline's "
                                                                   "identity this version keeps (a plain tf.data "
                                                                   "iterator, or an earlier version of batchloaders), "
                                                                   "so whether it fits this pipeline cannot be told"),
    (tf.errors.NotFoundError, "Failed to find any matching files", "no checkpoint is there: its index file "
                                                                   "(.index) is missing"),
    (tf.errors.OpError, "No such file or directory", "a file of it is missing"),
    (tf.errors.OpError, "sstable", "its index file (.index) cannot be read: it is damaged or cut short"),
    (tf.errors.OpError, "Unable to read file", "its index file (.index) cannot be read: it is damaged or cut short"),
)


def _damage(error: BaseException) -> str | None:
    return next((what for kind, said, what in _DAMAGE if isinstance(error, kind) and said in str(error)), None)


def damaged(save_path: str, error: BaseException, where: str = "$") -> ResumeError:
    """The ResumeError for a checkpoint whose files TensorFlow cannot read: its path and what is wrong."""
    return ResumeError(Problem(save_path, where, (
        f"the checkpoint cannot be read: {_damage(error) or 'it is damaged'} (TensorFlow: {_first_line(error)}); "
        "expected the files of a finished save: restore an earlier checkpoint (tf.train.CheckpointManager keeps "
        "max_to_keep of them)")))


def restore_checkpoint(checkpoint: tf.train.Checkpoint, save_path: str | None):
    """``checkpoint.restore(save_path)``, where a damaged or cut-short checkpoint raises a ResumeError naming its
    path and what is wrong instead of TensorFlow's DataLossError (or IndexError, OpError) of the read.

    Example:
        >>> checkpoint = tf.train.Checkpoint(iterator=batches, model=model)
        >>> batchloaders.restore_checkpoint(checkpoint, tf.train.latest_checkpoint(directory))

    Args:
        checkpoint: the ``tf.train.Checkpoint`` to restore into.
        save_path: the checkpoint's path prefix (``tf.train.latest_checkpoint``'s); None restores nothing, as
            ``checkpoint.restore(None)`` does.

    Returns:
        What ``checkpoint.restore`` returns: its load status.

    Raises:
        ResumeError: the checkpoint's files cannot be read (damaged, cut short, or not a checkpoint).
    """
    try:
        return checkpoint.restore(save_path)
    except (IndexError, tf.errors.OpError) as error:
        if save_path is None or _damage(error) is None:
            raise  # not a read of the checkpoint's files (a tf.data iterator state of another pipeline, say)
        raise damaged(save_path, error) from None


STATE_FORMAT = "batchloaders.resume/1"
_STATE_KEYS = {"format": str, "seed": int, "batches_consumed": int, "config": str}


def _plain_value(value, kind):
    """A checkpointer's integer or string as Python's own (Orbax and NumPy give numpy.int64, numpy.str_, 0-d
    arrays); anything else as it is, for the check to refuse."""
    try:
        if kind is int and not isinstance(value, (bool, str, bytes, float)):
            return operator.index(value)
        if kind is str and isinstance(value, str):
            return str(value)
        if kind is str and getattr(value, "shape", None) == () and hasattr(value, "item"):
            return value.item() if isinstance(value.item(), str) else value
    except TypeError:
        pass
    return value


def plain_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` with its values as Python's own ints and strings (see :func:`_plain_value`)."""
    kinds = dict(_STATE_KEYS, position=int)
    return {k: _plain_value(v, kinds.get(k, str)) for k, v in state.items()}


def _state_problems(state, *, positional: bool) -> list[tuple[str, str]]:
    """(JSON path, what is wrong) of each key of a get_state dict that is missing or not what it should be."""
    if not isinstance(state, Mapping):
        return [("$", f"found a {type(state).__name__}: expected the dict ResumableIterator.get_state gives")]
    wanted = dict(_STATE_KEYS, **({"position": int} if positional else {}))
    problems = []
    for key, kind in wanted.items():
        value = _plain_value(state.get(key), kind)
        if key not in state:
            why = (" (it was saved without a global shuffle)" if key == "position" else "")
            problems.append((f"$.{key}", f"missing{why}: expected the dict ResumableIterator.get_state gives"))
        elif not isinstance(value, kind) or isinstance(value, bool) or (kind is int and not 0 <= value <= determinism.MAX_SEED):
            problems.append((f"$.{key}", f"found {value!r}: expected {'an integer >= 0' if kind is int else 'a string'}"))
    if not problems and state["format"] != STATE_FORMAT:
        problems.append(("$.format", f"found {state['format']!r}: expected {STATE_FORMAT!r}"))
    extra = sorted(set(state) - set(wanted))
    if extra:
        problems.append((f"$.{extra[0]}", f"found key(s) {', '.join(map(repr, extra))}, which this pipeline's state does "
                                          "not have (a state saved with a global shuffle has a position)"))
    return problems


class _Running:
    """The iterator giving the batches, out of tf.Module's reach (it tracks every trackable attribute)."""

    batches = None
    seed = None  # what the running pipeline draws from, and the fingerprint it was checked against
    fingerprint = None
    at = 0  # a global shuffle's position of the run's order, after the batches given
