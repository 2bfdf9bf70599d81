"""A TFDS-prepared data directory as TFDS describes it: ``dataset_info.json`` and ``features.json``, read as JSON.

``tfds.builder(...).download_and_prepare()`` writes, beside its ``NAME-SPLIT.tfrecord-NNNNN-of-NNNNN`` shards,
the dataset's splits (``dataset_info.json``: each split's file name template and records per shard) and its
features (``features.json``: the ``FeaturesDict`` with every feature's TFDS type, dtype and shape, the class
names of a ``ClassLabel`` in ``NAME.labels.txt`` beside it). This module turns that description into manifest
features, as TFDS stores them in each ``tf.train.Example``:

* ``Image``: the encoded bytes, ``string []`` (``batchloaders init`` adds a ``decode_image`` step);
* ``ClassLabel``: ``int64 []``, its names as the feature's ``class_names``;
* ``Text``: ``string []``; ``Tensor`` and ``Scalar``: their dtype and shape, ``null`` for an unknown first axis;
* ``Sequence``: its feature with one more axis first (``null`` for an unknown length), a ``Sequence`` of a
  dict each of its features so (``objects/bbox``);
* a nested ``FeaturesDict``: its features named ``parent/child``, as TFDS names them in the records.

Any other type (``Video``, ``Audio``, a ``Sequence`` of sequences, a ``Tensor`` stored as bytes...) is
returned as :class:`Unknown`: the manifest writer infers those features from the records instead.
TensorFlow Datasets itself is not imported.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re

from batchloaders.errors import ManifestError, Problem, suggest

INFO_NAME, FEATURES_NAME = "dataset_info.json", "features.json"
DTYPES = {"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
          "uint32", "uint64", "bool", "string"}  # the manifest's dtypes
_STRINGS = {"string", "str", "bytes", "object"}  # how TFDS versions spell a string tensor's dtype
_SHARD = "[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]"
_PLACEHOLDER = re.compile(r"\{([A-Z_]+)\}")
_GLOB_CHARS = re.compile(r"([][*?{},])")


@dataclasses.dataclass(frozen=True)
class Unknown:
    """A TFDS feature without a manifest form here: its features are inferred from the records."""

    name: str  # the feature's name in the records ('objects/mask')
    type: str  # its TFDS class, as features.json names it
    at: str  # JSON path in features.json
    why: str = "which has no manifest form here"

    def message(self, path: str) -> str:
        """The line saying so, ``path`` the features.json shown."""
        return (f"{path}: {self.at}: feature {self.name!r} is a TFDS {self.type.rsplit('.', 1)[-1]} "
                f"({self.type}), {self.why}: it is inferred from the records instead; check it in the manifest (or "
                "declare it there by hand)")


@dataclasses.dataclass(frozen=True)
class Split:
    """One split of the dataset: the glob of its files (relative to the directory) and its records per file."""

    name: str
    pattern: str
    shard_lengths: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class TfdsInfo:
    """What TFDS's own files say of the data directory."""

    name: str
    splits: dict[str, Split]
    features: list[dict]  # manifest features, in features.json's order
    unknown: list[Unknown]
    notes: list[str]  # what each feature was taken to be, for the manifest command's summary


def is_tfds_dir(directory: str) -> bool:
    """Whether ``directory`` holds TFDS's description of its data: ``dataset_info.json`` beside a ``features.json``
    that names TFDS's classes (other tools' files of those names are left alone)."""
    if not os.path.isfile(os.path.join(directory, INFO_NAME)):
        return False
    try:
        with open(os.path.join(directory, FEATURES_NAME), encoding="utf-8") as f:
            features = json.load(f)
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(features, dict) and ("pythonClassName" in features or "featuresDict" in features)


def read_info(directory: str) -> TfdsInfo:
    """TFDS's description of the data in ``directory``.

    Args:
        directory: a TFDS-prepared data directory (see :func:`is_tfds_dir`).

    Returns:
        The dataset's name, splits, manifest features, the features left to inference, and notes.

    Raises:
        ManifestError: a file that cannot be read or is not the JSON TFDS writes, naming the file and JSON path;
            data files that are not TFRecord files.
    """
    info_path = os.path.join(directory, INFO_NAME)
    info = _json(info_path)
    name = info.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError(Problem(info_path, "$.name", f"found {json.dumps(name)}: expected the dataset's name"))
    file_format = info.get("fileFormat", "tfrecord")
    if file_format != "tfrecord":
        raise ManifestError(Problem(info_path, "$.fileFormat", f"found {json.dumps(file_format)}: expected "
                                    "\"tfrecord\" (prepare the dataset with file_format='tfrecord' to read it "
                                    "with batchloaders)"))
    splits, at = {}, "$.splits"
    features, unknown, notes = [], [], []
    try:
        for i, split in enumerate(info.get("splits") or ()):
            at = f"$.splits[{i}]"
            splits[split["name"]] = Split(split["name"], _split_pattern(name, split, file_format),
                                          tuple(int(n) for n in split.get("shardLengths") or ()))
        info_path, at = os.path.join(directory, FEATURES_NAME), "$"
        _walk(_json(info_path), [], "$", _Walk(directory, features, unknown, notes))
    except ManifestError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise ManifestError(Problem(info_path, at, f"found a layout other than TFDS's ({type(error).__name__}: "
                                                   f"{error}): expected the JSON TFDS 4 writes")) from None
    return TfdsInfo(name, splits, features, unknown, notes)


def split_pattern(info: TfdsInfo, split: str, directory: str) -> str:
    """The glob of ``split``'s files, relative to the directory; ManifestError naming the splits there if none."""
    if split not in info.splits:
        names = list(info.splits)
        raise ManifestError(Problem(os.path.join(directory, INFO_NAME), "$.splits",
                                    f"found no split {split!r} (named by --split): expected one of "
                                    f"{', '.join(names) or '(none listed)'}{suggest(split, names)}"))
    return info.splits[split].pattern


def _json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as error:
        raise ManifestError(Problem(path, "$", f"cannot be read ({error.strerror or error})")) from None
    except (ValueError, UnicodeDecodeError) as error:
        raise ManifestError(Problem(path, "$", f"found text that is not JSON ({error}): expected the JSON TFDS "
                                               "writes")) from None
    if not isinstance(data, dict):
        raise ManifestError(Problem(path, "$", f"found a JSON {type(data).__name__}: expected an object"))
    return data


def _split_pattern(name: str, split: dict, file_format: str) -> str:
    """``{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}`` (TFDS's default template) made a glob of the split's files."""
    template = split.get("filepathTemplate") or "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
    values = {"DATASET": name, "SPLIT": split["name"], "FILEFORMAT": file_format}
    parts = []
    for i, piece in enumerate(_PLACEHOLDER.split(template)):
        if i % 2 == 0:
            parts.append(_GLOB_CHARS.sub(r"[\1]", piece))
        elif piece in values:
            parts.append(_GLOB_CHARS.sub(r"[\1]", values[piece]))
        else:
            parts.append(_SHARD if piece == "SHARD_X_OF_Y" else "*")
    return "".join(parts)


@dataclasses.dataclass
class _Walk:
    directory: str
    features: list
    unknown: list
    notes: list


def _walk(node, parts: list[str], at: str, walk: _Walk, outer: tuple = (), sequence: tuple | None = None) -> None:
    """Add the manifest features of one features.json node (``outer``: the lengths of the Sequences around it,
    ``sequence``: the JSON path and type of the outermost one)."""
    kind = node.get("pythonClassName", "") if isinstance(node, dict) else ""
    short = kind.rsplit(".", 1)[-1]
    name = "/".join(parts)
    if short == "FeaturesDict":
        for key, child in (node.get("featuresDict", {}).get("features") or {}).items():
            _walk(child, parts + [key], f"{at}.featuresDict.features.{key}", walk, outer, sequence)
        return
    if short == "Sequence":
        length = int(node["sequence"].get("length", -1))
        _walk(node["sequence"]["feature"], parts, f"{at}.sequence.feature", walk,
              outer + (None if length < 0 else length,), sequence or (at, kind))
        return
    leaf = _leaf(short, node, walk.directory, parts)
    shape = None if leaf is None else list(outer) + leaf[1]
    if leaf is None:
        walk.unknown.append(Unknown(name, kind or "(no pythonClassName)", at))
        return
    if None in shape[1:]:  # TFDS stores lengths that vary on more axes than the first as ragged parts
        walk.unknown.append(Unknown(name, sequence[1], sequence[0], "whose values vary in length on more than the "
                                    "first axis (TFDS stores them as its ragged parts, ragged_flat_values and "
                                    "ragged_row_lengths_0...)"))
        return
    dtype, _, stored, names, note = leaf
    feature = {"name": name, "dtype": dtype, "shape": shape, "var_len": False, "deserialize_type": stored}
    if names:
        feature["class_names"] = names
    walk.features.append(feature)
    walk.notes.append(f"{name}: TFDS {short}{' in a Sequence' * len(outer)}: {note}")


def _leaf(short: str, node: dict, directory: str, parts: list[str]):
    """(dtype, shape, deserialize_type, class names, note) of a feature that is no dict or sequence, None when
    the feature has no manifest form here."""
    if short == "Image":
        image = node.get("image", {})
        if image.get("dtype", "uint8") not in ("uint8", "uint16"):
            return None  # float images are stored as PNG bytes of another dtype
        dims = "x".join("?" if int(d) < 0 else str(d) for d in image.get("shape", {}).get("dimensions", []))
        return "string", [], "string", None, (f"{image.get('encodingFormat') or 'PNG or JPEG'} bytes of "
                                              f"{dims or 'any'} pixels (decode_image decodes them)")
    if short == "ClassLabel":
        names = _class_names(directory, parts)
        count = node.get("classLabel", {}).get("numClasses")
        return "int64", [], "int", names, (f"class ids 0 to {int(count) - 1}" if count else "class ids") + (
            f", named in {_labels_file(parts)}" if names else "")
    if short == "Text" and not node.get("text"):
        return "string", [], "string", None, "text as UTF-8 bytes"
    if short == "BBoxFeature":
        return "float32", [4], "float", None, "a bounding box of 4 floats"
    if "tensor" in node and node["tensor"].get("encoding", "none") == "none":
        dtype = node["tensor"].get("dtype")
        dtype = "string" if dtype in _STRINGS else dtype
        if dtype not in DTYPES:
            return None
        shape = [None if int(d) < 0 else int(d) for d in node["tensor"].get("shape", {}).get("dimensions", [])]
        stored = "string" if dtype == "string" else "float" if dtype.startswith(("float", "bfloat")) else "int"
        return dtype, shape, stored, None, f"{dtype} values"
    return None


def _labels_file(parts: list[str]) -> str:
    """The name TFDS gives a ClassLabel's names file: parents joined by '-', the feature's own '/' made '.'."""
    return "-".join(parts[:-1] + [parts[-1].replace("/", ".")]) + ".labels.txt"


def _class_names(directory: str, parts: list[str]) -> list[str] | None:
    """The ClassLabel's names, one a line in its labels file; None when TFDS wrote none (classes by count only)."""
    path = os.path.join(directory, _labels_file(parts))
    try:
        with open(path, encoding="utf-8") as f:
            names = f.read().splitlines()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise ManifestError(Problem(path, "$", f"cannot be read ({getattr(error, 'strerror', None) or error})"
                                    ": expected the class names TFDS writes, one a line")) from None
    return names or None
