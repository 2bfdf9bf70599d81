"""Load and check a dataset manifest (``__manifest__.json``) into a typed :class:`Manifest`."""
from __future__ import annotations

import functools
import os
import re

from batchloaders.errors import ManifestError
from batchloaders.config.document import MANIFEST, Document, load_file
from batchloaders.core.limits import ITEM_BYTES, MAX_RECORD_BYTES, MAX_RECORD_ELEMENTS, elements
from batchloaders.core.model import DataFile, IndexFile, Manifest, ManifestFeature, file_key, url_scheme

MANIFEST_NAME = "__manifest__.json"
INDEX_SUFFIX = ".index"  # a data file's record index is the sidecar '<data file name>.index' (read/record_index.py)
# The temporary files `batchloaders index` writes an index to before renaming it (tempfile.mkstemp's names).
INDEX_TEMP = re.compile(r"\.__index__\.[A-Za-z0-9_]+\.tmp")


def is_sidecar(name: str) -> bool:
    """Whether a file name is a record index or a temporary one: never a data file, whatever a pattern says."""
    return name.endswith(INDEX_SUFFIX) or INDEX_TEMP.fullmatch(name) is not None


def load_manifest(path: str | os.PathLike) -> Manifest:
    """Read, schema-check and type a manifest file.

    Args:
        path: the manifest, ``__manifest__.json`` in a dataset directory.

    Returns:
        The checked manifest, frozen.

    Raises:
        ManifestError: every problem found (the file unreadable, its schema, its features), at once.
    """
    return manifest_from_document(load_file(path, ManifestError, MANIFEST))


def manifest_from_document(doc: Document) -> Manifest:
    from batchloaders.config.schema import schema_check  # deferred: jsonschema loads only when a manifest is read

    problems, invalid = schema_check(doc, "manifest.schema.json")
    data = doc.data
    # Semantic checks run on every feature that passed the schema, so one run reports both kinds.
    if problems and not (isinstance(data, dict) and isinstance(data.get("features"), list)
                         and not any(bad[:1] in ((), ("allow_var_len",)) for bad in invalid)
                         and "allow_var_len" in data):
        raise ManifestError(problems)
    allow_var_len = data["allow_var_len"]
    features: dict[str, ManifestFeature] = {}

    def problem(parts, message):
        problems.append(doc.problem(tuple(parts), message))

    def valid(parts) -> bool:
        n = len(parts)
        return not any(bad[:n] == parts or parts[:len(bad)] == bad for bad in invalid)

    for i, f in enumerate(data["features"]):
        at = ("features", i)
        if not valid(at):
            continue
        name, dtype, dtype_kind = f["name"], f["dtype"], f["deserialize_type"]
        if name in features:
            problem(at + ("name",), f"duplicate feature name {name!r}: every feature name must be unique")
        var_len = f.get("var_len")
        if var_len is None:
            if allow_var_len:
                problem(at, "missing required key 'var_len': it is required when allow_var_len is true "
                            "(false for a context feature, true for a feature list)")
            var_len = False
        elif var_len and not allow_var_len:
            problem(at + ("var_len",), "found var_len true, but allow_var_len is false: records are Examples, "
                                       "which hold no feature lists; set allow_var_len to true (SequenceExample "
                                       "records), or var_len to false (with a shape that begins with null for a "
                                       "value list that varies in length)")
        if dtype_kind == "string" and dtype != "string":
            problem(at + ("dtype",), f"found dtype {dtype!r} for deserialize_type 'string': expected 'string' "
                                     "(use deserialize_type 'raw' to decode bytes into numbers)")
        if dtype_kind in ("int", "float", "raw") and dtype == "string":
            problem(at + ("dtype",), f"found dtype 'string' for deserialize_type {dtype_kind!r}: expected a "
                                     "numeric or bool dtype (use deserialize_type 'string' for bytes)")
        if dtype_kind == "raw" and dtype in ("uint32", "uint64"):
            problem(at + ("dtype",), f"found dtype {dtype!r} for deserialize_type 'raw', which tf.io.decode_raw "
                                     "cannot produce: expected another numeric dtype (e.g. uint8, int32, int64, "
                                     "float32) or bool")
        args = f.get("deserialize_args") or {}
        shape, ragged = _shape(f["shape"], bool(var_len), at, problem)
        feature = ManifestFeature(
            name=name, dtype=dtype, shape=shape, var_len=bool(var_len) or ragged,
            deserialize_type=dtype_kind, endian=args.get("endian"),
            raw_len=1 if var_len or ragged else int(args.get("len", 1)), ragged=ragged)
        _check_record_size(feature, at, problem)
        features[name] = feature
    files = _files(doc, data.get("files") if valid(("files",)) else None, problem)
    if problems:
        raise ManifestError(problems)
    return Manifest(path=doc.source, compression=data["compression"], allow_var_len=allow_var_len,
                    features=features, files=files)


def _shape(shape: list, feature_list: bool, at: tuple, problem) -> tuple[tuple[int, ...], bool]:
    """(the shape of one row, whether the first axis is variable): ``[null, 3]`` is rows of 3 values, any number of
    them. Only a feature's own value list can vary so (a feature list's steps vary in number already)."""
    ragged = bool(shape) and shape[0] is None
    rest = shape[1:] if ragged else shape
    for i, dim in enumerate(rest, start=int(ragged)):
        if dim is None:
            problem(at + ("shape", i), f"found null at axis {i} of shape {_shown(shape)}: expected an axis length "
                                       "(1 or more); only the first axis may be null (a variable length)")
    if ragged and feature_list:
        problem(at + ("shape", 0), f"found shape {_shown(shape)} with var_len true: expected a step shape of "
                                   "fixed lengths (a feature list varies in its number of steps already), or "
                                   "var_len false for a feature whose value list varies in length")
    return tuple(dim for dim in rest if dim is not None), ragged


def _shown(shape: list) -> str:
    return "[" + ", ".join("null" if dim is None else str(dim) for dim in shape) + "]"


def _files(doc: Document, entries, problem) -> dict[str, DataFile]:
    """The ``files`` entries by :func:`file_key` of their paths; names must stay inside the manifest's directory
    (a local one, or a URL's such as ``gs://bucket/data``)."""
    out: dict[str, DataFile] = {}
    base = file_key(doc.base_dir)
    for i, entry in enumerate(entries or ()):
        at = ("files", i, "name")
        name = entry["name"]
        try:
            path = file_key(base.rstrip("/") + "/" + name) if url_scheme(base) else os.path.normpath(
                os.path.join(base, name))
        except ValueError as e:  # an embedded NUL
            problem(at, f"found {name!r}, which is not a valid path ({e}): expected a path relative to {base}")
            continue
        if _outside(name, path, base):
            problem(at, f"found {name!r}, outside the manifest's directory: expected a path relative to {base}")
            continue
        if path in out:
            problem(at, f"found {name!r} a second time (first at line {out[path].line}): expected each file once")
            continue
        index = entry.get("index")
        if index is not None and index["name"] != name + INDEX_SUFFIX:
            # The sidecar sits beside its data file, so a name elsewhere is a hand edit or a copied entry.
            problem(("files", i, "index", "name"), f"found {index['name']!r}: expected {name + INDEX_SUFFIX!r}, the "
                                                   "data file's name with '.index' appended")
            index = None
        if index is not None:
            index = IndexFile(name=index["name"], size_bytes=index["size_bytes"], sha256=index["sha256"])
        out[path] = DataFile(name=name, num_records=entry["num_records"], size_bytes=entry.get("size_bytes"),
                             sha256=entry.get("sha256"), index=index,
                             locate=functools.partial(doc.line_of, ("files", i)))
    return out


def _outside(name: str, path: str, base: str) -> bool:
    """Whether a ``files`` name (``path`` once joined to directory ``base``) lies outside ``base``."""
    if url_scheme(base) is not None:
        return name.startswith("/") or not path.startswith(base.rstrip("/") + "/")
    return os.path.isabs(name) or os.path.relpath(path, base).split(os.sep)[0] == os.pardir


def _check_record_size(feature: ManifestFeature, at: tuple, problem) -> None:
    """One record's value of a feature (one step of a feature list) must fit TensorFlow and protobuf."""
    count = elements(feature.record_shape)
    size = count * ITEM_BYTES[feature.dtype]
    where = at + (("deserialize_args", "len") if feature.raw_len > 1 else ("shape",))
    unit = ("one row of this feature" if feature.ragged else "one step of this feature list" if feature.var_len
            else "one record's value of this feature")
    if count > MAX_RECORD_ELEMENTS:
        problem(where, f"found {count:,} elements in {unit} (shape {list(feature.record_shape)}): expected at "
                       f"most {MAX_RECORD_ELEMENTS:,}")
    elif size > MAX_RECORD_BYTES:
        problem(where, f"found {size:,} bytes in {unit} (shape {list(feature.record_shape)}, "
                       f"{feature.dtype}): expected at most {MAX_RECORD_BYTES:,} (a record is one protobuf, "
                       "which holds at most 2 GiB)")
