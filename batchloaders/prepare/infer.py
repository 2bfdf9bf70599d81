"""Manifest features inferred from records, for ``batchloaders manifest DIR`` when none are declared.

Every feature found becomes ``{"name", "dtype", "shape", "var_len",
"deserialize_type"}``: an int64_list is ``int``/``int64``, a float_list
``float``/``float32``, a bytes_list ``string``/``string``; a context feature
(or an Example's feature) holding ``count`` values in every record has the
shape ``[count]``, or ``[]`` when ``count`` is 1 (a scalar), and one whose
value count varies from record to record the shape ``[null]`` (a
variable-length feature, as seqio and TFDS store token lists); a feature list
holding ``count`` values in every step has the step shape ``[count]``, or ``[]``
when ``count`` is 1 (a scalar per step). Records
with feature lists make the dataset one of SequenceExamples (``allow_var_len`` true).

Nothing in a record tells raw tensor bytes from text: a bytes feature whose
every value has one length N, not all of them printable text, gets a note
(:func:`raw_hint`) naming the dtypes and shapes of N bytes; ``--raw
NAME=DTYPE[SHAPE]`` (:func:`parse_raw`, :func:`raw_feature`) declares it.

Every feature a manifest declares must be in every record, and a feature
list's steps have one shape: a feature whose list type changes, which some
records lack, or a feature list whose steps hold different numbers of values
cannot be described, and is left out with the reason.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
from typing import Iterable, Mapping

import tensorflow as tf
from google.protobuf.message import DecodeError

from batchloaders.errors import DataError, Problem
from batchloaders.core.limits import ITEM_BYTES
from batchloaders.core.model import ManifestFeature
from batchloaders.read import naming
from batchloaders.read.records import count, shown
from batchloaders.transform.steps.decode_image import image_format, image_shape

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
    formats: dict = dataclasses.field(default_factory=dict)  # image format of a bytes value (None: not one) -> place
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
        place = naming.record_name(shown(path), index)
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
        (kind,) = item.kinds
        deserialize_type, dtype = KINDS[kind]
        features.append({"name": name, "dtype": dtype, "shape": _shape(item), "var_len": "list" in item.where,
                         "deserialize_type": deserialize_type})
    return Inferred(allow_var_len=with_lists, features=features, left_out=left_out, records=total, seen=seen)


def _shape(item: Seen) -> list:
    """The manifest shape of a feature that can be described: ``[null]`` when its value count varies."""
    if len(item.counts) > 1:
        return [None]
    (values,) = item.counts
    return [] if values == 1 else [values]  # one value a record, or a step: a scalar


def _note_values(item: Seen, value, place: str) -> None:
    """Record the list type and value count of one feature value (a record's, or a step's), and its bytes' lengths."""
    kind = value.WhichOneof("kind")
    _first_seen(item.kinds, kind, place)
    values = getattr(value, kind).value if kind else ()
    _first_seen(item.counts, len(values), place)
    if kind == "bytes_list":
        for data in values:
            _first_seen(item.lengths, len(data), place)
            _first_seen(item.formats, image_format(data) if image_shape(data) else None, place)
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
    if len(item.counts) > 1 and steps:
        found = "; ".join(f"{count(n, 'value')} in {place}" for n, place in sorted(item.counts.items())[:3])
        more = f" and {len(item.counts) - 3} more counts" if len(item.counts) > 3 else ""
        return (f"its number of values per step varies ({found}{more}): every step of a feature list has one "
                "shape")
    return None


def raw_size(item: Seen) -> int | None:
    """N when every value of a bytes feature is N bytes (N > 0) and one byte string a record or step, else None."""
    one_per_step = "list" not in item.where or set(item.counts) == {1}
    if set(item.kinds) != {"bytes_list"} or len(item.lengths) != 1 or not one_per_step:
        return None
    (size,) = item.lengths
    return size or None


def raw_hint(name: str, item: Seen) -> str | None:
    """The note that a bytes feature holds encoded images, or is probably a raw tensor; None when its values
    suggest neither.

    Values of one length that are all printable text (words, codes, ids) are taken for text.
    """
    if item.formats and None not in item.formats:
        return (f"{name}: every value is an encoded image ({_either(sorted(item.formats))}): the decode_image step "
                "turns it into pixels (`batchloaders init` writes one)")
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
    (kind,), values = item.kinds, max(item.counts)
    steps, ragged = "list" in item.where, len(item.counts) > 1  # (a feature list's count varies: refused above)
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
    if not steps and values > 1 and not ragged:  # the record's byte strings stack on a first axis
        args["len"] = values
    # A varying number of byte strings: a variable-length feature, one row per byte string.
    return {"name": name, "dtype": raw.dtype, "shape": [None] * ragged + _raw_shape(raw, size), "var_len": steps,
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
    (kind,) = item.kinds
    unit = "step" if feature["var_len"] else "record"
    article = "an" if kind[0] in "aeiou" else "a"
    shape = json.dumps(feature["shape"])
    if len(item.counts) > 1:  # a variable-length feature
        fewest, most = min(item.counts), max(item.counts)
        return (f"{feature['name']}: {feature['dtype']} {shape} ({article} {kind} of {fewest:,} to "
                f"{count(most, 'value')} in the records looked at: a variable length)")
    (values,) = item.counts
    return (f"{feature['name']}: {feature['dtype']} {shape}{' per step' if feature['var_len'] else ''} "
            f"({article} {kind} of {count(values, 'value')} in every {unit} looked at)")


# Feature names taken for targets (any case); ``targets`` is seqio's and T5's name for the tokens to predict.
TARGET_NAMES = ("label", "labels", "target", "targets", "y")
# Characters a tensor name keeps: Keras refuses '/' in a layer or input name, and TensorFlow's name scopes (a
# Keras layer's, such as an output layer named as its target) take only these.
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


def tensor_names(names: Iterable[str]) -> dict[str, str]:
    """The tensor name of each stored feature name: the name itself when Keras and TensorFlow accept it, else
    its other characters replaced by ``_`` (``image/encoded`` -> ``image_encoded``), ``_2``, ``_3``... appended
    when that name is taken.

    Args:
        names: the manifest's feature names.

    Returns:
        Stored name -> tensor name, each tensor name different.
    """
    names = list(names)
    taken = {name for name in names if not _NAME_CHARS.search(name)}
    out = {}
    for name in names:
        if name in taken and name not in out.values():
            out[name] = name
            continue
        base = _NAME_CHARS.sub("_", name)
        chosen, n = base, 2
        while chosen in taken:
            chosen, n = f"{base}_{n}", n + 1
        taken.add(chosen)
        out[name] = chosen
    return out


def suggested_targets(features: Mapping[str, ManifestFeature]) -> tuple[list[str], str]:
    """The features a model would predict, as the data suggests them, and why (or why there is none).

    Features named like a label (TARGET_NAMES, or ending so after a ``/``: the TF models scripts' ImageNet and
    COCO records hold ``image/class/label``) are targets. Else, in SequenceExamples, integer feature lists of
    one value per step beside float feature lists are labels per step (phones beside audio frames, tags
    beside sensor readings); integer feature lists alone are more likely the input (tokens, characters).

    Args:
        features: the manifest's features by name.

    Returns:
        (target names in the manifest's order, the reason as a phrase for a comment).
    """
    named = [name for name in features if name.lower().rsplit("/", 1)[-1] in TARGET_NAMES]
    if named:
        return named, (f"the feature{'s' * (len(named) > 1)} named like a label ({', '.join(TARGET_NAMES)}, or "
                       "ending so after a /, as image/class/label)")
    lists = [f for f in features.values() if f.var_len and not f.ragged]
    floats = [f.name for f in lists if f.deserialize_type == "float"]
    labels = [f.name for f in lists if f.deserialize_type == "int" and f.record_shape in ((), (1,))]
    if floats and labels:
        return labels, (f"{', '.join(labels)} {'holds' if len(labels) == 1 else 'hold'} one integer per step beside "
                        f"the float feature list{'s' * (len(floats) > 1)} {', '.join(floats)}: a label per step")
    return [], (f"no feature is named like a label ({', '.join(TARGET_NAMES)})"
                + (", and no feature list holds one integer per step beside float feature lists (a label per step)"
                   if lists else ""))
