"""Manifest features inferred from records, for ``batchloaders manifest DIR`` when none are declared.

Every feature found becomes ``{"name", "dtype", "shape": [count], "var_len",
"deserialize_type"}``: an int64_list is ``int``/``int64``, a float_list
``float``/``float32``, a bytes_list ``string``/``string``; a context feature
(or an Example's feature) holds ``count`` values in every record, a feature
list ``count`` values in every step. Records with feature lists make the
dataset one of SequenceExamples (``allow_var_len`` true).

A manifest describes fixed shapes only, and every feature it declares must be
in every record: a feature whose value count varies, whose list type
changes, or which some records lack cannot be described, and is left out
with the reason.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable

import tensorflow as tf
from google.protobuf.message import DecodeError

from batchloaders.errors import DataError, Problem
from batchloaders.read.records import count, shown

SAMPLE_RECORDS = 64  # records of each file looked at
KINDS = {"int64_list": ("int", "int64"), "float_list": ("float", "float32"), "bytes_list": ("string", "string")}


@dataclasses.dataclass(frozen=True)
class Inferred:
    allow_var_len: bool
    features: list[dict]  # manifest feature objects, sorted by name
    left_out: list[str]  # "feature 'x' left out: why", one per feature that cannot be described
    records: int  # records looked at


@dataclasses.dataclass
class _Seen:
    """What the records looked at show of one feature name; each value maps to where it was first seen."""

    where: dict = dataclasses.field(default_factory=dict)  # "context" | "list" -> place
    kinds: dict = dataclasses.field(default_factory=dict)  # "int64_list" | ... | None -> place
    counts: dict = dataclasses.field(default_factory=dict)  # values per record (per step for lists) -> place
    records: int = 0  # records holding it


def _first_seen(table: dict, key, place: str) -> None:
    table.setdefault(key, place)


def infer(samples: Iterable[tuple[str, int, bytes]]) -> Inferred:
    """Infer features from (path, record index, serialized record) triples; raise DataError for a non-protobuf."""
    seen: dict[str, _Seen] = {}
    total, missing_place = 0, {}
    with_lists = False
    names_per_record = []
    for path, index, serialized in samples:
        place = f"{shown(path)}: record {index}"
        try:
            record = tf.train.SequenceExample.FromString(serialized)
        except DecodeError as error:
            raise DataError(Problem(shown(path), f"record {index}", "not a tf.train.Example or "
                                    f"tf.train.SequenceExample protobuf ({error})")) from None
        total += 1
        context, lists = record.context.feature, record.feature_lists.feature_list
        with_lists |= bool(len(lists))
        for name, value in context.items():
            item = seen.setdefault(name, _Seen())
            item.records += 1
            _first_seen(item.where, "context", place)
            kind = value.WhichOneof("kind")
            _first_seen(item.kinds, kind, place)
            _first_seen(item.counts, len(getattr(value, kind).value) if kind else 0, place)
        for name, steps in lists.items():
            item = seen.setdefault(name, _Seen())
            item.records += 1
            _first_seen(item.where, "list", place)
            for step in steps.feature:
                kind = step.WhichOneof("kind")
                _first_seen(item.kinds, kind, place)
                _first_seen(item.counts, len(getattr(step, kind).value) if kind else 0, place)
        names_per_record.append((place, set(context.keys()) | set(lists.keys())))
    for place, names in names_per_record:
        for name in seen.keys() - names:
            missing_place.setdefault(name, place)

    features, left_out = [], []
    for name in sorted(seen):
        item = seen[name]
        subject = f"feature list {name!r}" if "list" in item.where else f"feature {name!r}"
        why = _why_not(item, total, missing_place.get(name))
        if why:
            left_out.append(f"{subject} left out: {why}")
            continue
        (kind,), (values,) = item.kinds, item.counts
        deserialize_type, dtype = KINDS[kind]
        features.append({"name": name, "dtype": dtype, "shape": [values], "var_len": "list" in item.where,
                         "deserialize_type": deserialize_type})
    return Inferred(allow_var_len=with_lists, features=features, left_out=left_out, records=total)


def _why_not(item: _Seen, total: int, missing: str | None) -> str | None:
    """Why a feature cannot be described by a manifest, or None when it can."""
    if len(item.where) > 1:
        return (f"a context feature in some records ({item.where['context']}) and a feature list in others "
                f"({item.where['list']})")
    if item.records < total:
        return (f"missing from {total - item.records:,} of {count(total, 'record')} looked at "
                f"(first from {missing}): every feature a manifest declares must be in every record")
    steps = "list" in item.where
    if not item.kinds:
        return "no record holds a step of it, so its type cannot be told"
    if None in item.kinds:
        return f"holds no value list (in {item.kinds[None]}), so its type cannot be told"
    if len(item.kinds) > 1:
        found = "; ".join(f"{kind} in {place}" for kind, place in item.kinds.items())
        return f"stored in different list types: {found}"
    if set(item.counts) == {0}:
        return f"holds no values (in {item.counts[0]}), so its shape cannot be told"
    if len(item.counts) > 1:
        unit = "step" if steps else "record"
        found = "; ".join(f"{count(n, 'value')} in {place}" for n, place in sorted(item.counts.items())[:3])
        more = f" and {len(item.counts) - 3} more counts" if len(item.counts) > 3 else ""
        return (f"its number of values per {unit} varies ({found}{more}): a manifest describes fixed shapes only"
                + ("" if steps else "; a value that varies in length belongs in a feature list of a "
                                    "SequenceExample"))
    return None
