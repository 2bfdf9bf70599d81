"""Manifest features inferred from records, for ``batchloaders manifest DIR`` when none are declared.

Every feature found becomes ``{"name", "dtype", "shape", "var_len",
"deserialize_type"}``: an int64_list is ``int``/``int64``, a float_list
``float``/``float32``, a bytes_list ``string``/``string``; a context feature
(or an Example's feature) holding ``count`` values in every record has the
shape ``[count]``, or ``[]`` when ``count`` is 1 (a scalar); a feature list
holding ``count`` values in every step has the step shape ``[count]``. Records
with feature lists make the dataset one of SequenceExamples (``allow_var_len`` true).

Nothing in a record tells raw tensor bytes from text: a bytes feature whose
every value has one length N, not all of them printable text, gets a note
(:func:`raw_hint`) naming the dtypes and shapes of N bytes; ``--raw
NAME=DTYPE[SHAPE]`` (:func:`parse_raw`, :func:`raw_feature`) declares it.

A manifest describes fixed shapes only, and every feature it declares must be
in every record: a feature whose value count varies, whose list type
changes, or which some records lack cannot be described, and is left out
with the reason.
"""
from __future__ import annotations

import dataclasses
import math
import re
import shlex
from typing import Iterable

import tensorflow as tf
from google.protobuf.message import DecodeError

from batchloaders.errors import DataError, Problem
from batchloaders.spec.limits import ITEM_BYTES
from batchloaders.read.records import count, shown

SAMPLE_RECORDS = 64  # records of each file looked at
KINDS = {"int64_list": ("int", "int64"), "float_list": ("float", "float32"), "bytes_list": ("string", "string")}
# The dtypes tf.io.decode_raw gives (not uint32/uint64; bool is one byte per value), as a raw hint lists them.
RAW_DTYPES = ("uint8", "int8", "bool", "int16", "uint16", "float16", "bfloat16", "int32", "float32", "int64",
              "float64")
_RAW_SPEC = re.compile(r"\s*([^=\s](?:[^=]*[^=\s])?)\s*=\s*([A-Za-z0-9]+)\s*(?:\[([^\]]*)\])?\s*")


@dataclasses.dataclass(frozen=True)
class Inferred:
    allow_var_len: bool
    features: list[dict]  # manifest feature objects, sorted by name
    left_out: list[str]  # "feature 'x' left out: why", one per feature that cannot be described
    records: int  # records looked at
    seen: dict  # feature name -> Seen, every feature found


@dataclasses.dataclass
class Seen:
    """What the records looked at show of one feature name; each value maps to where it was first seen."""

    where: dict = dataclasses.field(default_factory=dict)  # "context" | "list" -> place
    kinds: dict = dataclasses.field(default_factory=dict)  # "int64_list" | ... | None -> place
    counts: dict = dataclasses.field(default_factory=dict)  # values per record (per step for lists) -> place
    lengths: dict = dataclasses.field(default_factory=dict)  # bytes of a bytes_list value -> place
    binary: str | None = None  # the first place of a bytes value that is not printable text
    records: int = 0  # records holding it
    missing: str | None = None  # the first record looked at that lacks it


@dataclasses.dataclass(frozen=True)
class Raw:
    """A ``--raw NAME=DTYPE[SHAPE]`` declaration; ``shape`` None when the text gives none (flat)."""

    text: str
    name: str
    dtype: str
    shape: tuple[int, ...] | None


def _first_seen(table: dict, key, place: str) -> None:
    table.setdefault(key, place)


def infer(samples: Iterable[tuple[str, int, bytes]]) -> Inferred:
    """Infer features from (path, record index, serialized record) triples; raise DataError for a non-protobuf."""
    seen: dict[str, Seen] = {}
    total = 0
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
            item = seen.setdefault(name, Seen())
            item.records += 1
            _first_seen(item.where, "context", place)
            _note_values(item, value, place)
        for name, steps in lists.items():
            item = seen.setdefault(name, Seen())
            item.records += 1
            _first_seen(item.where, "list", place)
            for step in steps.feature:
                _note_values(item, step, place)
        names_per_record.append((place, set(context.keys()) | set(lists.keys())))
    for place, names in names_per_record:
        for name in seen.keys() - names:
            if seen[name].missing is None:
                seen[name].missing = place

    features, left_out = [], []
    for name in sorted(seen):
        item = seen[name]
        subject = f"feature list {name!r}" if "list" in item.where else f"feature {name!r}"
        why = _why_not(item, total)
        if why:
            left_out.append(f"{subject} left out: {why}")
            continue
        (kind,), (values,) = item.kinds, item.counts
        deserialize_type, dtype = KINDS[kind]
        steps = "list" in item.where
        features.append({"name": name, "dtype": dtype, "shape": [] if values == 1 and not steps else [values],
                         "var_len": steps, "deserialize_type": deserialize_type})
    return Inferred(allow_var_len=with_lists, features=features, left_out=left_out, records=total, seen=seen)


def _note_values(item: Seen, value, place: str) -> None:
    """Record the list type and value count of one feature value (a record's, or a step's), and its bytes' lengths."""
    kind = value.WhichOneof("kind")
    _first_seen(item.kinds, kind, place)
    values = getattr(value, kind).value if kind else ()
    _first_seen(item.counts, len(values), place)
    if kind == "bytes_list":
        for data in values:
            _first_seen(item.lengths, len(data), place)
            if item.binary is None and not _text(data):
                item.binary = place


def _text(data: bytes) -> bool:
    try:
        return data.decode("utf-8").isprintable()
    except UnicodeDecodeError:
        return False


def _why_not(item: Seen, total: int) -> str | None:
    """Why a feature cannot be described by a manifest, or None when it can."""
    if len(item.where) > 1:
        return (f"a context feature in some records ({item.where['context']}) and a feature list in others "
                f"({item.where['list']})")
    if item.records < total:
        return (f"missing from {total - item.records:,} of {count(total, 'record')} looked at "
                f"(first from {item.missing}): every feature a manifest declares must be in every record")
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


def raw_size(item: Seen) -> int | None:
    """N when every value of a bytes feature is N bytes (N > 0) and one byte string a record or step, else None."""
    one_per_step = "list" not in item.where or set(item.counts) == {1}
    if set(item.kinds) != {"bytes_list"} or len(item.lengths) != 1 or not one_per_step:
        return None
    (size,) = item.lengths
    return size or None


def raw_hint(name: str, item: Seen) -> str | None:
    """The note that a bytes feature is probably a raw tensor, or None when its values do not suggest one.

    Values of one length that are all printable text (words, codes, ids) are taken for text.
    """
    size = raw_size(item)
    if size is None or item.binary is None:
        return None
    likely = _shapes(size)[-1]
    return (f"{name}: every value is {count(size, 'byte')}: probably a raw tensor ({raw_candidates(size)}); "
            f"declare it with --raw {shlex.quote(f'{name}=uint8{_spec_shape(likely)}')}")


def raw_candidates(size: int) -> str:
    """The raw dtypes whose item size divides ``size`` and likely shapes of that many bytes, grouped by item size:
    'uint8, int8 or bool [784] or [28, 28]; ...; int64 or float64 [98]'."""
    groups = []
    for item_bytes in sorted({ITEM_BYTES[dtype] for dtype in RAW_DTYPES}):
        if size % item_bytes == 0:
            names = [dtype for dtype in RAW_DTYPES if ITEM_BYTES[dtype] == item_bytes]
            shapes = " or ".join(map(str, _shapes(size // item_bytes)))
            groups.append(f"{_either(names)} {shapes}")
    return "; ".join(groups)


def _shapes(elements: int) -> list[list[int]]:
    """[elements], then [s, s] (one channel) and [s, s, 3] (three) when ``elements`` makes a square image of at
    least 4 x 4."""
    shapes = [[elements]]
    for channels in (1, 3):
        side = math.isqrt(elements // channels)
        if side >= 4 and side * side * channels == elements:
            shapes.append([side, side] + ([channels] if channels > 1 else []))
    return shapes


def _either(names: list[str] | tuple[str, ...]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _spec_shape(shape) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def parse_raw(text: str) -> Raw:
    """``NAME=DTYPE[SHAPE]`` (``[SHAPE]`` optional) as a Raw; ValueError saying what is wrong with it."""
    match = _RAW_SPEC.fullmatch(text)
    if not match:
        raise ValueError("expected NAME=DTYPE[SHAPE], such as image=uint8[28,28]")
    name, dtype, dims = match.groups()
    if dtype not in RAW_DTYPES:
        raise ValueError(f"found dtype {dtype!r}: expected a dtype raw bytes decode to ({_either(RAW_DTYPES)})")
    if dims is None:
        return Raw(text, name, dtype, None)
    parts = [part.strip() for part in dims.split(",")] if dims.strip() else []
    if not all(re.fullmatch(r"[0-9]+", part) and int(part) > 0 for part in parts):
        raise ValueError(f"found the shape [{dims}]: expected axis sizes of at least 1 between commas, such as "
                         "[28,28] ([] for a single value)")
    return Raw(text, name, dtype, tuple(int(part) for part in parts))


def raw_feature(raw: Raw, inferred: Inferred) -> dict:
    """The manifest feature ``raw`` declares, checked against the records looked at; ValueError when they differ."""
    name, item = raw.name, inferred.seen.get(raw.name)
    if item is None:
        raise ValueError(f"no feature {name!r} in the {count(inferred.records, 'record')} looked at: expected one "
                         f"of {', '.join(sorted(inferred.seen)) or 'none'}")
    why = _why_not(item, inferred.records)
    if why:
        raise ValueError(f"feature {name!r} cannot be declared: {why}")
    (kind,), (values,) = item.kinds, item.counts
    steps = "list" in item.where
    if kind != "bytes_list":
        raise ValueError(f"feature {name!r} is stored in an {kind}: expected a bytes_list, where raw tensors are")
    if steps and values != 1:
        raise ValueError(f"every step of feature list {name!r} holds {count(values, 'value')}: expected 1, the "
                         "raw bytes of the step")
    if len(item.lengths) > 1:
        found = "; ".join(f"{count(n, 'byte')} in {place}" for n, place in sorted(item.lengths.items())[:3])
        raise ValueError(f"the values of {name!r} differ in length ({found}): expected one length, the size of "
                         "the raw tensor")
    (size,) = item.lengths
    args = {"endian": "little"}
    if not steps and values > 1:  # the record's byte strings stack on a first axis
        args["len"] = values
    return {"name": name, "dtype": raw.dtype, "shape": _raw_shape(raw, size), "var_len": steps,
            "deserialize_type": "raw", "deserialize_args": args}


def _raw_shape(raw: Raw, size: int) -> list[int]:
    """The shape ``raw`` gives values of ``size`` bytes (flat when it gives none); ValueError if the sizes differ."""
    item_bytes = ITEM_BYTES[raw.dtype]
    if size == 0:
        raise ValueError(f"every value of {raw.name!r} is empty: expected the bytes of a raw tensor")
    if size % item_bytes:
        raise ValueError(f"every value of {raw.name!r} is {count(size, 'byte')}, not a whole number of {raw.dtype} "
                         f"values ({item_bytes} bytes each): expected one of {raw_candidates(size)}")
    shape = list(raw.shape) if raw.shape is not None else [size // item_bytes]
    if math.prod(shape) * item_bytes != size:
        such = " or ".join(map(str, _shapes(size // item_bytes)))
        raise ValueError(f"{raw.dtype} {shape} is {count(math.prod(shape) * item_bytes, 'byte')}, but every value of "
                         f"{raw.name!r} is {count(size, 'byte')}: expected a shape of {size // item_bytes:,} "
                         f"elements, such as {such}")
    return shape


def guess_text(feature: dict, item: Seen) -> str:
    """What an inferred feature's dtype and shape rest on: 'id: int64 [] (an int64_list of 1 value in every
    record looked at)'."""
    (kind,), (values,) = item.kinds, item.counts
    unit = "step" if feature["var_len"] else "record"
    article = "an" if kind[0] in "aeiou" else "a"
    return (f"{feature['name']}: {feature['dtype']} {feature['shape']}{' per step' if feature['var_len'] else ''} "
            f"({article} {kind} of {count(values, 'value')} in every {unit} looked at)")
