"""What tests/test_fuzz.py fuzzes with: tiny datasets, valid base documents, mutation strategies, the worker.

- ``MANIFESTS`` / ``BASES``: five tiny real datasets (Examples, gzip Examples,
  continuous Examples read through a list file, continuous SequenceExamples,
  discrete SequenceExamples) and a valid base config for each (all three loader
  types, YAML and JSON, every secondary feature type, slices, padding).
- ``make_fixture(root, slots)`` writes them, with a config directory next to
  the data for each worker slot and, for the manifest cases, a copy of each
  dataset with a valid config reading it.
- ``config_cases`` / ``manifest_cases`` / ``build_cases``: hypothesis strategies
  of ``Draft`` cases that mutate the valid base documents at the data level
  (boundary numbers, deleted and unknown keys, near-miss enums, odd strings,
  emptied or doubled lists, odd shapes and slices) and at the text level (YAML
  tags, anchors and aliases, recursive aliases, billion laughs, deep nesting,
  truncation, random bytes, BOM, tabs, other encodings and line breaks).
- ``Worker``: a client of tests/fuzz_worker.py running in a child process, with a
  per-case timeout and memory ceiling; a crash, a timeout or a runaway is
  reported and the worker restarted. ``run_parallel`` runs one case per worker.
"""
from __future__ import annotations

import base64
import copy
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time

import yaml
from hypothesis import strategies as st

from conftest import feature as _feature

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER_SCRIPT = os.path.join(HERE, "fuzz_worker.py")

# ---------------------------------------------------------------------------------------------
# Tiny datasets and valid base documents
# ---------------------------------------------------------------------------------------------


_INDEP_FEATURES = [_feature("id", "int64", [], "int"), _feature("x", "float32", [3], "float"),
                   _feature("name", "string", [], "string"),
                   _feature("r", "uint8", [4], "raw", endian="little")]
# The manifests of the fixture's datasets (what tests/seqdata.py writes for the sequence ones).
MANIFESTS = {
    "indep": {"compression": None, "allow_var_len": False, "features": _INDEP_FEATURES},
    "indep_gz": {"compression": "gzip", "allow_var_len": False, "features": _INDEP_FEATURES},
    "cont": {"compression": None, "allow_var_len": False,
             "features": [_feature("x", "float32", [4, 2], "float"), _feature("y", "int64", [4], "int")]},
    "cont_seq": {"compression": None, "allow_var_len": True,
                 "features": [_feature("x", "float32", [2], "float", var_len=True),
                              _feature("y", "int64", [], "int", var_len=True)]},
    "disc": {"compression": None, "allow_var_len": True,
             "features": [_feature("frames", "float32", [2], "float", var_len=True),
                          _feature("words", "int64", [], "int", var_len=True),
                          _feature("rid", "int64", [], "int", var_len=False),
                          _feature("pair", "float32", [2], "float", var_len=False)]},
}


def _write_datasets(data):
    """data/<name>/: the datasets, each with its manifest from MANIFESTS (written last: the
    sequence writers of tests/seqdata.py write their own, the same)."""
    import pathlib

    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    from conftest import example, write_records
    from seqdata import write_continuous, write_discrete

    def indep_records(f):
        return [example(id=("int", [10 * f + r]), x=("float", [f, r, f + r]), name=("bytes", [f"n{f}{r}"]),
                        r=("bytes", [bytes([f, r, 1, 2])])) for r in range(4)]

    for f in range(3):
        write_records(os.path.join(data, "indep", f"part-{f}.tfrecords"), indep_records(f))
    for f in range(2):
        write_records(os.path.join(data, "indep_gz", f"part-{f}.tfrecords"), indep_records(f), "gzip")
    write_continuous(pathlib.Path(data, "cont"), [6, 6], layout="example", chunk=4)
    with open(os.path.join(data, "cont", "files.list"), "w") as f:
        f.write("# the data files, relative to this list\npart-0.tfrecords\npart-1.tfrecords\n")
    write_continuous(pathlib.Path(data, "cont_seq"), [[3, 5, 2, 7], [4, 4, 6]], layout="sequence")
    write_discrete(pathlib.Path(data, "disc"), [[(3, 2), (1, 4), (5, 5), (2, 1), (4, 3)],
                                                [(2, 2), (6, 3), (1, 1), (3, 5)]])
    for name, manifest in MANIFESTS.items():
        with open(os.path.join(data, name, "__manifest__.json"), "w") as f:
            json.dump(manifest, f, indent=1)


def _dataset(name, data_rel):
    if name == "cont":
        return {"type": "list", "args": {"manifest_file": f"{data_rel}/cont/__manifest__.json",
                                         "list_file": f"{data_rel}/cont/files.list"}}
    return {"type": "dir", "args": {"data_dir": f"{data_rel}/{name}"}}


def base_configs(data_rel="../data"):
    """{base name: (dataset name, config dict, suffix)}: valid configs for the fixture's datasets."""
    shuffle = {"shuffle": True, "num_shuffle_buffer_elements": 16, "num_filenames_shuffle_buffer": 3,
               "num_mix_files": 2}
    indep = {
        "name": "fuzz-independent", "type": "independent",
        "model": {"inputs": ["x", "name", "xlen", "k", "r"], "targets": ["label"]},
        "args": {"dataset": _dataset("indep", data_rel), "target_batch_size": 4, "drop_remainder": True,
                 "epochs": None, "num_parallel_reads": 2, "num_parallel_parses": 2,
                 "num_read_buffer_bytes": 262144, "num_prefetch": 2, **shuffle, "sloppy_interleave": False,
                 "num_interleave_out_buffer_elements": 2, "num_interleave_in_buffer_elements": 2, "seed": 1,
                 "primary_features": [{"from_name": "x", "to_name": "x"}, {"from_name": "id", "to_name": "label"},
                                      {"from_name": "name", "to_name": "name"}, {"from_name": "r", "to_name": "r"}],
                 "secondary_features": [
                     {"to_name": "xlen", "type": "length", "args": {"tensor": "x", "dtype": "int64"}},
                     {"to_name": "k", "type": "const", "args": {"shape": [2], "dtype": "int32", "value": 7}}],
                 "processing_steps": [{"tensor": "x", "type": "slice", "args": {"slice": "[1:]"}},
                                      {"tensor": "x", "type": "normalize", "args": {"axis": 0, "epsilon": 0.001}},
                                      {"tensor": "k", "type": "one_hot", "args": {"depth": 3, "dtype": "int32"}},
                                      {"tensor": "r", "type": "clip", "args": {"min": 0, "max": 5}}],
                 "padding": [{"tensor": "x", "shape": [4], "value": -1.0}]}}
    indep_gz = {
        "type": "independent", "model": {"inputs": ["x"], "targets": ["label"]},
        "args": {"dataset": _dataset("indep_gz", data_rel), "target_batch_size": 3, "drop_remainder": False,
                 "epochs": 2, "num_read_buffer_bytes": 0, "num_prefetch": -1, "num_parallel_reads": -1,
                 "num_parallel_parses": -1, "multi_load": True,
                 "primary_features": [{"from_name": "x", "to_name": "x"}, {"from_name": "id", "to_name": "label"}]}}
    cont = {
        "$schema": "../schemas/loader_config.schema.json", "name": "fuzz-continuous",
        "type": "continuous_sequence", "model": {"inputs": ["x", "xlen"], "targets": ["y"]},
        "args": {"dataset": _dataset("cont", data_rel), "target_batch_size": 4, "drop_remainder": True,
                 "epochs": None, "num_read_buffer_bytes": 1024, "num_prefetch": 1, **shuffle,
                 "num_mix_files": 2, "seed": 2, "min_window": 5, "max_window": 5, "stride": 3,
                 "primary_features": [{"from_name": "x", "to_name": "x"}, {"from_name": "y", "to_name": "y"}],
                 "secondary_features": [{"to_name": "xlen", "type": "length", "args": {"tensor": "x"}}],
                 "processing_steps": [{"tensor": "y", "type": "slice", "args": {"slice": "[1:]"}},
                                      {"tensor": "x", "type": "reverse", "args": {"axis": 0}},
                                      {"tensor": "y", "type": "cast", "args": {"dtype": "float32"}}]}}
    cont_seq = {
        "type": "continuous_sequence", "model": {"inputs": ["x"], "targets": ["y", "ylen"]},
        "args": {"dataset": _dataset("cont_seq", data_rel), "target_batch_size": 3, "drop_remainder": False,
                 "epochs": 1, "num_read_buffer_bytes": 0, "num_prefetch": 0, "min_window": 2, "max_window": 6,
                 "stride": None, "seed": None,
                 "primary_features": [{"from_name": "x", "to_name": "x"}, {"from_name": "y", "to_name": "y"}],
                 "secondary_features": [{"to_name": "ylen", "type": "length", "args": {"tensor": "y"}}],
                 "padding": True,
                 "bucketing": {"by": "x", "boundaries": [3, 5], "max_tokens": 12, "pad_to_boundary": ["y"]}}}
    disc = {
        "name": "fuzz-discrete", "type": "discrete_sequence",
        "model": {"inputs": ["frames", "seg", "bnd", "rid"], "targets": ["next_words"]},
        "args": {"dataset": _dataset("disc", data_rel), "target_batch_size": 2, "drop_remainder": True,
                 "epochs": None, "num_read_buffer_bytes": 0, "num_prefetch": 2, **shuffle, "num_mix_files": 2,
                 "seed": 3, "min_window": 1, "max_window": 3,
                 "primary_features": [{"from_name": "frames", "to_name": "frames"},
                                      {"from_name": "words", "to_name": "next_words"},
                                      {"from_name": "rid", "to_name": "rid"}],
                 "secondary_features": [{"to_name": "seg", "type": "segment_ids", "args": {"tensor": "frames"}},
                                        {"to_name": "bnd", "type": "boundaries",
                                         "args": {"tensor": "frames", "dtype": "int64"}}],
                 "processing_steps": [{"tensor": "frames", "type": "slice", "args": {"slice": "[:-1]"}},
                                      {"tensor": "seg", "type": "slice", "args": {"slice": "[:-1]"}},
                                      {"tensor": "next_words", "type": "slice", "args": {"slice": "[1:]"}},
                                      {"tensor": "frames", "type": "frame_stack", "args": {"left": 1, "right": 1}},
                                      {"tensor": "rid", "type": "pad_to", "args": {"size": 3, "value": -1}},
                                      {"tensor": "next_words", "type": "subsample", "args": {"every": 1}}],
                 "padding": [{"tensor": "seg", "value": -1}, {"tensor": "rid", "value": -1}]}}
    disc_chunk = {
        "name": "fuzz-chunked", "type": "discrete_sequence",
        "model": {"inputs": ["words", "k", "n", "key"], "targets": ["count"]},
        "args": {"dataset": _dataset("disc", data_rel), "target_batch_size": 3, "drop_remainder": False,
                 "epochs": 2, "num_read_buffer_bytes": 0, "num_prefetch": 1, "seed": 4, "min_window": 1,
                 "max_window": 3,
                 "primary_features": [{"from_name": "words", "to_name": "words"}],
                 "secondary_features": [{"to_name": "k", "type": "chunk_index"},
                                        {"to_name": "count", "type": "chunk_count", "args": {"dtype": "int64"}},
                                        {"to_name": "n", "type": "length", "args": {"tensor": "words"}},
                                        {"to_name": "key", "type": "source_key"}],
                 "padding": [{"tensor": "words", "value": -1}],
                 "chunking": {"size": 2, "step": 1, "context": [1, 2], "min_size": 2, "shuffle_buffer": 5,
                              "tensors": [{"tensor": "words", "context": [2, 0]}]}}}
    return {"indep": ("indep", indep, ".yaml"), "indep_gz": ("indep_gz", indep_gz, ".json"),
            "cont": ("cont", cont, ".yaml"), "cont_seq": ("cont_seq", cont_seq, ".yaml"),
            "disc": ("disc", disc, ".yaml"), "disc_chunk": ("disc", disc_chunk, ".yaml")}


LOADER_OF_BASE = {"indep": "independent", "indep_gz": "independent", "cont": "continuous_sequence",
                  "cont_seq": "continuous_sequence", "disc": "discrete_sequence", "disc_chunk": "discrete_sequence"}


BASES = base_configs("../data")


class Draft:
    """One case before it is placed in a fixture: what to write and how to check it."""

    def __init__(self, kind, name, text, suffix, build=False, notes=()):
        self.kind = kind  # "config" or "manifest"
        self.name = name  # base config name, or dataset name for a manifest
        self.text = text  # str or bytes
        self.suffix = suffix
        self.build = build
        self.notes = list(notes)

    def __repr__(self):
        return (f"Draft(kind={self.kind!r}, name={self.name!r}, build={self.build}, suffix={self.suffix!r}, "
                f"notes={self.notes!r}, text={self.text!r})")


class Fixture:
    """Paths of one fuzzing fixture (see ``make_fixture``). Every worker slot has its own directories."""

    def __init__(self, root, slots):
        self.root = root
        self.slots = slots

    def config_dir(self, slot=0):
        return os.path.join(self.root, f"configs{slot}")

    def manifest_dir(self, dataset, slot=0):
        return os.path.join(self.root, f"mdata{slot}", dataset)

    def manifest_config(self, dataset, slot=0):
        return os.path.join(self.root, f"mconfigs{slot}", dataset + ".yaml")

    def case(self, draft: Draft, slot: int = 0) -> dict:
        if draft.kind == "config":
            return payload({"kind": "config", "suffix": draft.suffix, "build": draft.build,
                            "dir": self.config_dir(slot)}, draft.text)
        return payload({"kind": "manifest", "suffix": ".json", "build": draft.build,
                        "dir": self.manifest_dir(draft.name, slot),
                        "config": self.manifest_config(draft.name, slot)}, draft.text)


def make_fixture(root, slots: int = 1) -> Fixture:
    """Under ``root``: data/ (the datasets) and, for each worker slot i, configs<i>/ (where config
    cases are written, next to data/), mdata<i>/ (a copy of every dataset, whose manifest the
    manifest cases overwrite) and mconfigs<i>/ (a valid config for each of those copies)."""
    root = str(root)
    data = os.path.join(root, "data")
    _write_datasets(data)
    for slot in range(slots):
        os.makedirs(os.path.join(root, f"configs{slot}"), exist_ok=True)
        os.makedirs(os.path.join(root, f"mconfigs{slot}"), exist_ok=True)
        for base, (dataset, doc, _) in base_configs(f"../mdata{slot}").items():
            if base != dataset:
                continue
            shutil.copytree(os.path.join(data, dataset), os.path.join(root, f"mdata{slot}", dataset))
            with open(os.path.join(root, f"mconfigs{slot}", dataset + ".yaml"), "w") as f:
                f.write(dump(doc, ".yaml"))
    return Fixture(root, slots)


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's is several times faster


def dump(doc, suffix: str, **options) -> str:
    if suffix == ".json":
        return json.dumps(doc, **options)
    return yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, **options)


BASE_TEXTS = {name: dump(doc, suffix) for name, (_, doc, suffix) in BASES.items()}


def payload(case: dict, text: str | bytes) -> dict:
    """Put ``text`` into a case: as "text" when it is plain UTF-8 text, else as base64 "data"."""
    if isinstance(text, str):
        try:
            text.encode("utf-8")
            return {**case, "text": text}
        except UnicodeEncodeError:
            text = text.encode("utf-8", "surrogatepass")
    return {**case, "data": base64.b64encode(text).decode("ascii")}


def case_bytes(case: dict) -> bytes:
    return base64.b64decode(case["data"]) if "data" in case else case["text"].encode("utf-8")


# ---------------------------------------------------------------------------------------------
# Data-level mutations
# ---------------------------------------------------------------------------------------------

BIG = [2**31 - 1, 2**31, 2**32, 2**53, 2**63 - 1, 2**63, 2**64, 10**30]
BOUNDARY = [0, -1, -2**31, *BIG, 1e9, 1.0, 1.5, -0.0, float("inf"), float("nan"), True, False, None,
            "three", "", [], {}]
ODD_STRINGS = ["", " ", "ü", "日本語", "\u202e", "🙂", "a\x00b", "a\nb", "\t", "x" * 5000, "../", "/", "~", ".",
               "null", "true", "1", "-1", "[:]", "$.args", "'", "\"", "\\", "%s", "{}", "*a", "&a", "!!int"]
ENUMS = {
    "type": ["independent", "continuous_sequence", "discrete_sequence", "dir", "list", "const", "length",
             "segment_ids", "boundaries", "slice", "cast", "reshape", "one_hot", "normalize", "clip", "pad_to",
             "reverse", "lookup", "frame_stack", "subsample"],
    "dtype": ["float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
              "uint32", "uint64", "bool", "string"],
    "deserialize_type": ["int", "float", "string", "raw"],
    "compression": [None, "zlib", "gzip"],
    "endian": ["little", "big"],
}
SHAPES = [[0], [0, 2], [2, 0], [], [1], [2**31], [2**31 - 1], [2**32], [2**63 - 1], [2**63], [-1], [-2**31],
          [65536, 65536], [1] * 40, [1] * 300, [3, 3], [4, 2], [2], [4], [16], [1.0], [True], [None], ["2"],
          [[2]], [2**16, 2**16, 2**16]]
SLICES = ["[:]", "[0]", "[-1]", "[1:]", "[:-1]", "[::2]", "[5:]", "[-100:]", "[100]", "[-100]", "[0, 0]",
          "[:, :]", "[2147483648:]", "[:99999999999999999999]", "[9223372036854775808]", "[::9223372036854775807]",
          "[1:0]", "[::0]", "[::-1]", "[ 1 : 2 : 1 ]", "[0,:,:,:,:,:,:,:]", "[]", "1:2", "[a]", "[1:2:3:4]",
          "[" + ",".join([":"] * 40) + "]", "[-0]", "[+1]", "[0" + "0" * 5000 + "]"]


def near_misses(value: str) -> list[str]:
    out = [value.upper(), value.capitalize(), value + " ", " " + value, value[:-1], value + "s", value + "\u200b",
           value.replace("_", "-"), value.replace("e", "a", 1), "ı" + value[1:]]
    return [v for v in out if v != value]


def iter_nodes(doc, path=()):
    """(path, value) for every node below the root (dict values and list items)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield path + (key,), value
            yield from iter_nodes(value, path + (key,))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield path + (i,), value
            yield from iter_nodes(value, path + (i,))


def _get(doc, path):
    for part in path:
        doc = doc[part]
    return doc


def _set(doc, path, value):
    _get(doc, path[:-1])[path[-1]] = value


def _delete(doc, path):
    del _get(doc, path[:-1])[path[-1]]


@st.composite
def mutate_once(draw, doc, *, keys=None, valid_ish=False):
    """Apply one random mutation to ``doc`` in place; returns a short description."""
    nodes = list(iter_nodes(doc))
    if keys is not None:
        nodes = [(p, v) for p, v in nodes if p and p[-1] in keys] or nodes
    path, value = draw(st.sampled_from(nodes))
    key = path[-1]
    ops = ["boundary"]
    if not valid_ish:
        ops += ["delete", "swap", "deep", "odd_string"]
        if isinstance(value, dict):
            ops += ["unknown_key", "unknown_key"]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        ops += ["number", "number", "big", "big"]
    if isinstance(value, bool):
        ops += ["toggle"]
    if isinstance(value, str):
        ops += ["near_miss", "odd_string"]
        if key == "slice":
            ops += ["slice", "slice"]
    if isinstance(value, list):
        ops += ["double", "empty", "dup_item"]
        if key == "shape":
            ops += ["shape", "shape", "shape"]
    if value is None:
        ops += ["number", "big"]
    op = draw(st.sampled_from(ops))
    if op == "boundary":
        new = draw(st.sampled_from(BOUNDARY))
        _set(doc, path, copy.deepcopy(new))
    elif op == "big":
        new = draw(st.sampled_from(BIG + [1, 2, 3]))
        _set(doc, path, new)
    elif op == "number":
        base = value if isinstance(value, (int, float)) and value == value and abs(value) < 2**64 else 1
        new = draw(st.sampled_from([base + 1, base - 1, -base, base * 1000, int(base) + 2**31, int(base) * 2**32,
                                    float(base), base + 0.5]))
        _set(doc, path, new)
    elif op == "toggle":
        _set(doc, path, not value)
    elif op == "delete":
        _delete(doc, path)
    elif op == "unknown_key":
        existing = [k for k in value if isinstance(k, str)]
        choices = ["unknown", "$schema", "日本", "x" * 300] + [near for k in existing[:6] for near in near_misses(k)[:3]]
        name = draw(st.sampled_from(choices))
        if name not in value:
            value[name] = draw(st.sampled_from([1, "a", None, [], {}]))
    elif op == "swap":
        other_path, other = draw(st.sampled_from(nodes))
        _set(doc, path, copy.deepcopy(other))
    elif op == "deep":
        depth = draw(st.sampled_from([20, 100, 200]))
        as_dict = draw(st.booleans())
        new = []
        for _ in range(depth):
            new = {"a": new} if as_dict else [new]
        _set(doc, path, new)
    elif op == "odd_string":
        _set(doc, path, draw(st.sampled_from(ODD_STRINGS)))
    elif op == "near_miss":
        choices = near_misses(value) + [v for k, vs in ENUMS.items() if k == key for v in vs]
        _set(doc, path, draw(st.sampled_from(choices)))
    elif op == "slice":
        _set(doc, path, draw(st.sampled_from(SLICES)))
    elif op == "double":
        _set(doc, path, value + copy.deepcopy(value))
    elif op == "empty":
        _set(doc, path, [])
    elif op == "dup_item":
        if value:
            value.append(copy.deepcopy(draw(st.sampled_from(value))))
    elif op == "shape":
        _set(doc, path, list(draw(st.sampled_from(SHAPES))))
    return f"{op} at {path}"


@st.composite
def mutated_document(draw, base, *, max_mutations=3, keys=None, valid_ish=False):
    doc = copy.deepcopy(base)
    done = []
    for _ in range(draw(st.integers(1, max_mutations))):
        if not list(iter_nodes(doc)):
            break
        done.append(draw(mutate_once(doc, keys=keys, valid_ish=valid_ish)))
    return doc, done


@st.composite
def serialized(draw, doc, suffix=None):
    """(text, suffix): ``doc`` as YAML or JSON, in one of several styles."""
    if suffix is None:
        suffix = draw(st.sampled_from([".yaml", ".json"]))
    if suffix == ".json":
        text = json.dumps(doc, indent=draw(st.sampled_from([None, 2])), ensure_ascii=draw(st.booleans()))
    else:
        text = dump(doc, suffix, default_flow_style=draw(st.sampled_from([False, None, True])),
                    allow_unicode=draw(st.booleans()))
    return text, suffix


# ---------------------------------------------------------------------------------------------
# Text-level mutations
# ---------------------------------------------------------------------------------------------

YAML_SCALARS = [
    "!!int abc", "!!int 1.5", "!!int ''", "!!float abc", "!!float 1e400", "!!timestamp 2001-12-14",
    "!!timestamp 2001-13-45", "!!timestamp x", "2001-12-14", "2001-12-14t21:59:43.10-05:00", "!!set {a, b}",
    "!!set {}", "!!binary aGVsbG8=", "!!binary '!!!'", "!!python/object:os.system {}",
    "!!python/object/apply:os.system ['true']", "!!python/name:os.system", "!custom x", "!custom {a: 1}",
    "!!omap [{a: 1}, {b: 2}]", "!!pairs [[a, 1]]", "!!null ''", "!!bool yes", "!!bool maybe", "!!str 5",
    "!!map {a: 1}", "!!seq [1]", "!<tag:yaml.org,2002:int> 7", "!<tag:example.com,2000:x> 1", "!!merge <<",
    ".nan", ".NaN", ".inf", "-.inf", "1.0", "1e400", "1.0e+400", "-0.0", "0x7fffffff", "0x80000000", "0o17",
    "0b101", "1_000_000", "190:20:30", "-190:20:30", "yes", "no", "on", "off", "~", "null", "'1'", "\"\\x00\"",
    "\"\\uD800\"", "1" * 5000, "-" + "9" * 4400, "1." + "0" * 5000, "[1, 2", "{a: 1", "&a 1", "*nosuch",
    "&a [*a]", "&a {k: *a}", "? [a]", "? {a: 1}\n  : 1", "|\n  text", ">\n  folded", "'unterminated",
    "\"unterminated", "[]", "{}", "[[]]", "[{}]", "a: b: c", "- a", "@reserved", "`reserved", "%", "!", "!!",
    "2147483648", "9223372036854775808", "18446744073709551616", "1e9", "1000000000", "-2147483649",
]
JSON_SCALARS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" * 5000, "1." + "0" * 5000, "2147483648",
                "9223372036854775808", "18446744073709551616", "-0", "-0.0", "1.0", "1E2", "\"\\ud800\"",
                "\"\\u0000\"", "[", "{", "}", "]", "true", "null", "\"\"", "[]", "{}", "01", "+1", ".5", "0x10",
                "'a'", "undefined", "// comment", "/* c */ 1", "\"a\" \"b\""]


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    lines = ['lol0: &l0 "lol"']
    for i in range(1, levels):
        lines.append(f"lol{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def billion_laughs_value(levels: int = 9, width: int = 9) -> str:
    """A flow sequence that defines and uses the chain, usable as any value."""
    items = ['&m0 "lol"']
    for i in range(1, levels):
        items.append(f"&m{i} [" + ", ".join([f"*m{i - 1}"] * width) + "]")
    return "[" + ", ".join(items) + "]"


def deep(depth: int, style: str) -> str:
    if style == "list":
        return "[" * depth + "]" * depth
    if style == "dict":
        return "{a: " * depth + "1" + "}" * depth
    if style == "json_dict":
        return '{"a": ' * depth + "1" + "}" * depth
    if style == "block":
        return "\n".join("  " * i + "- " + ("" if i < depth - 1 else "1") for i in range(depth))
    return "[" * depth  # unbalanced


def _value_spans(text: str):
    """(start, end) of the value after every 'key:' / '"key":' in ``text`` (to the end of its line)."""
    spans = []
    pos = 0
    for line in text.splitlines(keepends=True):
        stripped = line.rstrip("\r\n")
        colon = stripped.find(": ")
        if colon > 0 and not stripped.lstrip().startswith("#"):
            start = pos + colon + 2
            end = pos + len(stripped)
            if stripped.endswith(","):
                end -= 1
            spans.append((start, end))
        pos += len(line)
    return spans


@st.composite
def text_mutation(draw, text: str, suffix: str):
    """One text-level mutation of ``text``; returns (str or bytes, description)."""
    ops = ["truncate", "bytes", "bom", "tabs", "scalar", "deep", "insert_char", "crlf", "encoding"]
    if suffix == ".yaml":
        ops += ["scalar", "scalar", "scalar", "recursive", "laughs", "laughs_value", "anchor", "merge",
                "documents", "directive"]
    else:
        ops += ["scalar", "scalar", "duplicate_key"]
    op = draw(st.sampled_from(ops))
    spans = _value_spans(text)
    if op == "truncate":
        cut = draw(st.integers(0, max(len(text) - 1, 0)))
        return text[:cut], f"truncated at {cut}"
    if op == "bytes":
        raw = text.encode("utf-8")
        at = draw(st.integers(0, len(raw)))
        junk = draw(st.binary(min_size=1, max_size=8))
        return raw[:at] + junk + raw[at:], f"bytes {junk!r} at {at}"
    if op == "bom":
        return "\ufeff" + text, "BOM"
    if op == "tabs":
        return "\n".join(line.replace("  ", "\t", 1) for line in text.split("\n")), "tabs for indentation"
    if op == "crlf":
        return text.replace("\n", draw(st.sampled_from(["\r\n", "\r", "\x85", "\u2028"]))), "line breaks"
    if op == "encoding":
        codec = draw(st.sampled_from(["utf-16", "utf-32", "latin-1", "utf-16-le"]))
        return text.encode(codec, "replace"), f"encoded as {codec}"
    if op == "insert_char":
        at = draw(st.integers(0, len(text)))
        char = draw(st.sampled_from(["\x00", "\x07", "\x1b", "\ufffe", "\uffff", "\ud800", "\u202e", "🙂", "\t",
                                     ":", "-", "[", "{", "&", "*", "!", "%", "@", "`", "|", ">", "#", "'", '"',
                                     "\\"]))
        return text[:at] + char + text[at:], f"{char!r} at {at}"
    if op == "deep":
        depth = draw(st.sampled_from([50, 500, 990, 1000, 1100, 3000, 20000]))
        style = draw(st.sampled_from(["list", "unbalanced"] + (["dict", "block"] if suffix == ".yaml"
                                                               else ["json_dict"])))
        if style == "block":  # indentation grows with depth: 20000 levels would be a 400 MB file
            depth = min(depth, 1100)
        value = deep(depth, style)
        if spans and draw(st.booleans()):
            start, end = draw(st.sampled_from(spans))
            if style == "block":
                value = "\n" + value
            return text[:start] + value + text[end:], f"nesting {style} {depth} deep in a value"
        return value, f"whole document nested {style} {depth} deep"
    if op == "scalar" and spans:
        start, end = draw(st.sampled_from(spans))
        value = draw(st.sampled_from(YAML_SCALARS if suffix == ".yaml" else JSON_SCALARS))
        return text[:start] + value + text[end:], f"value {text[start:end]!r} -> {value[:40]!r}"
    if op == "recursive" and spans:
        start, end = draw(st.sampled_from(spans))
        value = draw(st.sampled_from(["&r [*r]", "&r {k: *r}", "&r [1, [2, *r]]", "&r [&s [*r, *s]]"]))
        return text[:start] + value + text[end:], f"recursive alias {value}"
    if op == "laughs":
        levels = draw(st.sampled_from([3, 5, 7, 9, 12]))
        return billion_laughs(levels) + text, f"billion laughs, {levels} levels, at top"
    if op == "laughs_value" and spans:
        start, end = draw(st.sampled_from(spans))
        levels = draw(st.sampled_from([4, 7, 9, 12]))
        return text[:start] + billion_laughs_value(levels) + text[end:], f"billion laughs, {levels} levels, in a value"
    if op == "anchor" and len(spans) >= 2:
        (s1, e1), (s2, e2) = sorted(draw(st.lists(st.sampled_from(spans), min_size=2, max_size=2, unique=True)))
        return (text[:s1] + "&z " + text[s1:e1] + text[e1:s2] + "*z" + text[e2:]), "anchor and alias"
    if op == "merge":
        return "base: &b {extra: 1}\n<<: *b\n" + text, "merge key"
    if op == "documents":
        return draw(st.sampled_from(["---\n" + text + "---\n" + text, text + "\n...\n", "--- |\n  text\n",
                                     "", "---\n", "# only a comment\n", "- " + text.replace("\n", "\n  "),
                                     "'" + text + "'"])), "documents"
    if op == "directive":
        return draw(st.sampled_from(["%YAML 1.2\n---\n", "%YAML 2.0\n---\n", "%TAG ! tag:x,2000:\n---\n",
                                     "%YAML 1.1\n%YAML 1.1\n---\n"])) + text, "directive"
    if op == "duplicate_key":
        if text.startswith("{") and '"type":' in text:
            return text.replace("{", '{"type": "independent", ', 1), "duplicate key"
    return text, "unchanged"


# ---------------------------------------------------------------------------------------------
# Case strategies
# ---------------------------------------------------------------------------------------------


@st.composite
def config_cases(draw):
    """A Draft: a mutated base config, validation only."""
    base = draw(st.sampled_from(sorted(BASES)))
    _, doc, _ = BASES[base]
    level = draw(st.sampled_from(["data", "data", "text", "both"]))
    notes = []
    if level in ("data", "both"):
        doc, done = draw(mutated_document(doc))
        notes += done
    text, suffix = draw(serialized(doc))
    if level in ("text", "both"):
        text, note = draw(text_mutation(text, suffix))
        notes.append(note)
    return Draft("config", base, text, suffix, False, notes)


@st.composite
def manifest_cases(draw, build: bool = False):
    """A Draft: a mutated base manifest (always JSON: it is __manifest__.json)."""
    dataset = draw(st.sampled_from(sorted(MANIFESTS)))
    doc = MANIFESTS[dataset]
    level = draw(st.sampled_from(["data", "data", "data", "text"])) if not build else "data"
    notes = []
    if level == "data":
        doc, done = draw(mutated_document(doc, valid_ish=build))
        notes += done
    text, _ = draw(serialized(doc, ".json"))
    if level == "text":
        text, note = draw(text_mutation(text, ".json"))
        notes.append(note)
    return Draft("manifest", dataset, text, ".json", build, notes)


# Keys whose values a user might plausibly push to the limits and still pass the schema.
TUNING_KEYS = {"target_batch_size", "epochs", "num_parallel_reads", "num_parallel_parses", "num_read_buffer_bytes",
               "num_prefetch", "shuffle", "num_shuffle_buffer_elements", "num_filenames_shuffle_buffer",
               "num_mix_files", "sloppy_interleave", "num_interleave_out_buffer_elements",
               "num_interleave_in_buffer_elements", "seed", "min_window", "max_window", "stride", "multi_load",
               "drop_remainder", "padding", "slice", "shape", "value", "dtype"}


@st.composite
def build_cases(draw):
    """A Draft: a config mutated only in values that may still validate, built if it does."""
    # The discrete loader's config validates least often after a mutation (three slices and
    # a padding list to break): draw it twice as often, so that it is built about as often.
    base = draw(st.sampled_from(sorted(BASES) + ["disc"]))
    _, doc, _ = BASES[base]
    doc, done = draw(mutated_document(doc, max_mutations=2, keys=TUNING_KEYS, valid_ish=True))
    text, suffix = draw(serialized(doc))
    return Draft("config", base, text, suffix, True, done)


# ---------------------------------------------------------------------------------------------
# The worker client
# ---------------------------------------------------------------------------------------------


class Worker:
    """tests/fuzz_worker.py in a child process; ``run`` sends one case and waits at most ``timeout``.

    A case the worker does not answer in time, that makes it outgrow ``memory_bytes``, or
    that kills it, comes back as {"outcome": "timeout" | "memory" | "crash", ...}; the worker is then restarted (its
    start-up is not counted against any case) and ``on_start`` runs again.
    """

    def __init__(self, log_path: str, on_start=None, memory_bytes: int | None = 4 * 2**30, slot: int = 0):
        # memory_bytes: resident memory at which a case counts as running away; the worker is
        # then killed and the case reported. (Not an address-space rlimit: TensorFlow reserves
        # 8 MiB of address space per thread, so one would fail thread creation, not allocation.)
        self.slot = slot  # which of the fixture's directories this worker writes to
        self.log_path = log_path
        self.on_start = on_start
        self.memory_bytes = memory_bytes
        self.proc = None
        self.restarts = -1
        self._buffer = b""
        self.start()

    def start(self):
        if self.proc is not None:  # a restart: let go of the dead worker's pipes and log
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            self._log.close()
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, WORKER_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, env=env, cwd=os.path.dirname(HERE))
        self._buffer = b""
        self.restarts += 1
        ready = self._read_line(time.monotonic() + 180)
        if ready is None or not json.loads(ready).get("ready"):
            raise RuntimeError(f"fuzz worker did not start: {ready!r}; stderr: {self.stderr_tail()}")
        if self.on_start is not None:
            self.on_start(self)

    def stderr_tail(self, limit=2000) -> str:
        try:
            self._log.flush()
            with open(self.log_path, "rb") as f:
                data = f.read()
            return data[-limit:].decode("utf-8", "replace")
        except OSError:
            return ""

    def rss_bytes(self) -> int:
        try:
            with open(f"/proc/{self.proc.pid}/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return 0

    def _read_line(self, deadline: float) -> bytes | None:
        """One line from the worker, b"" at EOF, None at the deadline or when the worker's
        memory passes ``memory_bytes`` (then ``self.too_big`` is set)."""
        fd = self.proc.stdout.fileno()
        self.too_big = 0
        while b"\n" not in self._buffer:
            # Past the deadline, take what is already there (a reply that came while another
            # worker was being waited for is not late) but wait no longer.
            left = max(deadline - time.monotonic(), 0)
            ready, _, _ = select.select([fd], [], [], min(left, 0.05))
            if not ready:
                if self.memory_bytes and self.rss_bytes() > self.memory_bytes:
                    self.too_big = self.rss_bytes()
                    return None
                if left <= 0:
                    return None
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return b""
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def submit(self, case: dict) -> None:
        self._started = time.monotonic()
        try:
            self.proc.stdin.write(json.dumps(case).encode("utf-8") + b"\n")
            self.proc.stdin.flush()
            self._sent = True
        except (BrokenPipeError, OSError):
            self._sent = False

    def collect(self, timeout: float, restart: bool = True) -> dict:
        """The reply to the submitted case, or a timeout/crash report (the worker is then restarted,
        at once or, with ``restart`` false, by the caller's ``restart_if_needed``)."""
        line = self._read_line(self._started + timeout) if self._sent else b""
        wall = time.monotonic() - self._started
        if line:
            reply = json.loads(line)
            reply["wall"] = wall
            return reply
        if line is None and self.too_big:
            self.kill()
            reply = {"outcome": "memory", "message": f"the worker grew to {self.too_big / 2**30:.1f} GiB after "
                                                     f"{wall:.1f} s (limit {self.memory_bytes / 2**30:.1f} GiB)",
                     "wall": wall, "stderr": self.stderr_tail()}
        elif line is None:
            self.kill()
            reply = {"outcome": "timeout", "message": f"no answer within {timeout} s", "wall": wall,
                     "stderr": self.stderr_tail()}
        else:
            code = self.proc.wait()
            name = signal.Signals(-code).name if code < 0 else f"exit status {code}"
            reply = {"outcome": "crash", "returncode": code, "message": f"the worker died: {name}", "wall": wall,
                     "stderr": self.stderr_tail()}
        if restart:
            self.start()
        return reply

    def restart_if_needed(self) -> None:
        if self.proc.poll() is not None:
            self.start()

    def run(self, case: dict, timeout: float) -> dict:
        self.submit(case)
        return self.collect(timeout)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self):
        if self.proc is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


def run_parallel(workers, cases_and_timeouts) -> list[dict]:
    """Run one case on each worker at once; the replies in order."""
    pairs = list(zip(workers, cases_and_timeouts))
    for worker, (case, _) in pairs:
        worker.submit(case)
    replies = [worker.collect(timeout, restart=False) for worker, (_, timeout) in pairs]
    for worker, _ in pairs:  # restart only once every reply is in: a restart takes seconds
        worker.restart_if_needed()
    return replies


def describe_case(case: dict, limit: int = 4000) -> str:
    """The case for a failure message: its text as written, or its repr if it holds control characters."""
    data = case_bytes(case)
    try:
        text = data.decode("utf-8")
        if any(ord(c) < 32 and c not in "\n\t" or 0x7f <= ord(c) < 0xa0 for c in text):
            text = "(repr) " + repr(text)
    except UnicodeDecodeError:
        text = "(bytes) " + repr(data)
    if len(text) > limit:
        text = text[:limit] + f"... ({len(text)} characters)"
    where = case["dir"] if case["kind"] == "config" else f"{case['dir']}, validated with {case['config']}"
    return f"{case['kind']} case ({case['suffix']}, build={case['build']}, next to {where}):\n{text}"
