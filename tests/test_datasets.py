"""The ``dataset`` key: which files a dir or list dataset names, in which order, and every way it can be wrong.

Every error test checks the whole Problem: the config file, the JSON path
``$.args.dataset.args.<key>``, the exact message and the config line of the key.
Trees are real files in tmp_path (tests run as root, so unreadable paths are
made with directories, dangling symlinks, symlink loops and FIFOs, not modes).
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import yaml

from batchloaders import ConfigError, build_input_fn, load_config
from batchloaders.config import datasets
from conftest import collect, example, feature, loader_config, write_manifest, write_records

FEATURES = [feature("id", "int64", [], "int")]
LIST_EXPECTED = "expected every entry to name an existing regular file"
TEXT_EXPECTED = "expected a text file with one data file path per line"
# (a str.format template: braces doubled)
WALK_EXPECTED = ("expected every entry the pattern '**/*{{.tfrecords,.tfrecord,.tfrec,"
                 "-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]}}{{,.gz,.zz}}' matches to be "
                 "a regular file and every directory to be listable, both within data_dir")


# ---------------------------------------------------------------------------------------------- helpers

def make_tree(root: pathlib.Path, spec: dict) -> None:
    """Create ``spec`` = {relative path: what} under root, in order.

    what: "file" (empty), "manifest", "dir", "fifo", "-> target" (symlink, target as written),
    "hardlink other" (hard link to root/other).
    """
    for rel, what in spec.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if what == "file":
            path.write_bytes(b"")
        elif what == "manifest":
            write_manifest(path.parent, FEATURES)
        elif what == "dir":
            path.mkdir()
        elif what == "fifo":
            os.mkfifo(path)
        elif what.startswith("-> "):
            os.symlink(what[3:], path)
        elif what.startswith("hardlink "):
            os.link(root / what[len("hardlink "):], path)
        else:
            raise AssertionError(what)


def config_file(tmp_path: pathlib.Path, dataset: dict) -> pathlib.Path:
    """A YAML config (one key per line, so every key has its own line) using ``dataset``."""
    cfg = loader_config("unused", [("id", "id")], inputs=["id"])
    cfg["args"]["dataset"] = dataset
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False, default_flow_style=False))
    return path


def dir_config(tmp_path, data_dir) -> pathlib.Path:
    return config_file(tmp_path, {"type": "dir", "args": {"data_dir": str(data_dir)}})


def list_config(tmp_path, list_file, manifest_file=None) -> pathlib.Path:
    if manifest_file is None:
        manifest_file = write_manifest(tmp_path / "manifest", FEATURES)
    return config_file(tmp_path, {"type": "list", "args": {"manifest_file": str(manifest_file),
                                                           "list_file": str(list_file)}})


def key_line(config: pathlib.Path, key: str) -> int:
    (line,) = [n for n, text in enumerate(config.read_text().splitlines(), 1) if text.strip().startswith(key + ":")]
    return line


def assert_problem(error: ConfigError, config: pathlib.Path, key: str, message: str) -> None:
    (problem,) = error.problems
    assert problem.message == message
    assert (problem.file, problem.path, problem.line) == (str(config), f"$.args.dataset.args.{key}",
                                                          key_line(config, key))


# ------------------------------------------------------------------------------------- dir: file order

ORDER = [
    ("files and subdirectories mixed at several levels",
     {"data/b.tfrecords": "file", "data/a.tfrecords": "file", "data/a/x.tfrecords": "file",
      "data/a/z.tfrecords": "file", "data/a/m/deep.tfrecords": "file", "data/a/m.tfrecords": "file",
      "data/ab.tfrecords": "file", "data/B.tfrecords": "file", "data/0.tfrecords": "file",
      "data/z/y/x.tfrecords": "file", "data/c/notes.txt": "file", "data/notdata.txt": "file"},
     ["0.tfrecords", "B.tfrecords", "a/m/deep.tfrecords", "a/m.tfrecords", "a/x.tfrecords", "a/z.tfrecords",
      "a.tfrecords", "ab.tfrecords", "b.tfrecords", "z/y/x.tfrecords"]),
    ("a symlink loop back to data_dir is not followed again",
     {"data/a.tfrecords": "file", "data/sub/b.tfrecords": "file", "data/sub/loop": "-> ..",
      "data/sub/deeper/c.tfrecords": "file", "data/sub/deeper/up": "-> .."},
     ["a.tfrecords", "sub/b.tfrecords", "sub/deeper/c.tfrecords"]),
    ("two symlinks to one file: the first in sorted order",
     {"data/real/f.tfrecords": "file", "data/zz.tfrecords": "-> real/f.tfrecords",
      "data/alias.tfrecords": "-> real/f.tfrecords"},
     ["alias.tfrecords"]),
    ("a hard link is the same file",
     {"data/a.tfrecords": "file", "data/b.tfrecords": "hardlink data/a.tfrecords"},
     ["a.tfrecords"]),
    ("a symlinked directory is listed under its first name in sorted order",
     {"data/z/f.tfrecords": "file", "data/link": "-> z"},
     ["link/f.tfrecords"]),
    ("a symlink out of data_dir to a file the pattern does not match is ignored, as any such name",
     {"outside/notes.txt": "file", "data/notes.txt": "-> ../outside/notes.txt", "data/own.tfrecords": "file"},
     ["own.tfrecords"]),
    ("a directory named *.tfrecords is walked; non-data names are ignored whatever they are",
     {"data/d.tfrecords/x.tfrecords": "file", "data/notes.txt": "file", "data/broken": "-> nowhere",
      "data/pipe": "fifo", "data/x.tfrecords.bak": "file", "data/self": "-> self"},
     ["d.tfrecords/x.tfrecords"]),
    ("data_dir itself is a symlink; paths keep its name",
     {"real/a.tfrecords": "file", "real/sub/b.tfrecords": "file", "real/sub/up": "-> ../../data",
      "data": "-> real"},
     ["a.tfrecords", "sub/b.tfrecords"]),
]


# ------------------------------------------------------------------------------------- dir: pattern

NAMES = {"data/a.tfrecords": "file", "data/b.tfrecord": "file", "data/c.tfrec": "file", "data/d.tfrecords.gz": "file",
         "data/e.tfrecord.zz": "file", "data/f.tfrecords.bak": "file", "data/notes.txt": "file",
         "data/train/g.tfrecords": "file", "data/train/h.tfrecord": "file", "data/test/i.tfrecords": "file",
         "data/test/deep/j.tfrecords": "file", "data/x.gz": "file"}
PATTERNS = [
    ("the default: TFRecord names and their compressed forms, anywhere below", None,
     ["a.tfrecords", "b.tfrecord", "c.tfrec", "d.tfrecords.gz", "e.tfrecord.zz", "test/deep/j.tfrecords",
      "test/i.tfrecords", "train/g.tfrecords", "train/h.tfrecord"]),
    ("one directory", "train/*", ["train/g.tfrecords", "train/h.tfrecord"]),
    ("* stays within a name", "*.tfrecords", ["a.tfrecords"]),
    ("**/ is any number of directories, none included", "**/*.tfrecords",
     ["a.tfrecords", "test/deep/j.tfrecords", "test/i.tfrecords", "train/g.tfrecords"]),
    ("alternatives", "{train,test}/*.tfrecords", ["test/i.tfrecords", "train/g.tfrecords"]),
    ("a character class and ?", "[a-c].tfrecor?", ["b.tfrecord"]),
    ("a negated class", "[!a].tfrecords*", ["d.tfrecords.gz", "f.tfrecords.bak"]),
]


@pytest.mark.parametrize("name, pattern, expected", PATTERNS, ids=[row[0] for row in PATTERNS])
def test_dir_dataset_pattern_chooses_the_files(tmp_path, name, pattern, expected):
    make_tree(tmp_path, NAMES)
    write_manifest(tmp_path / "data", FEATURES)
    args = {"data_dir": str(tmp_path / "data"), **({"pattern": pattern} if pattern else {})}
    config = load_config(config_file(tmp_path, {"type": "dir", "args": args}))
    assert list(config.dataset.files) == [os.path.join(str(tmp_path / "data"), rel) for rel in expected]
    assert config.dataset.pattern == (pattern or datasets.DEFAULT_PATTERN)


@pytest.mark.parametrize("pattern, message", [
    ("valid/*.tfrecords", "the pattern 'valid/*.tfrecords' matches no file under {d}: expected at least one data file; "
                          "found 12 other files, the first 10: 'a.tfrecords', 'b.tfrecord', 'c.tfrec', "
                          "'d.tfrecords.gz', 'e.tfrecord.zz', 'f.tfrecords.bak', 'notes.txt', 'test/deep/j.tfrecords', "
                          "'test/i.tfrecords', 'train/g.tfrecords'; pattern: \"**/{{*.gz,*.tfrecord,*.tfrecords}}\" "
                          "matches 8 of them"),
    ("{train,test/*", "found '{{train,test/*': found '{{' without '}}': expected {{alternative,alternative}}"),
    ("train}/*", "found 'train}}/*': found '}}' without '{{': expected {{alternative,alternative}}"),
    ("[abc.tfrecords", "found '[abc.tfrecords': found '[' without ']': expected a character class such as [0-9]"),
    ("/abs/*.tfrecords", "found '/abs/*.tfrecords': expected a pattern relative to data_dir, such as "
                         "'**/*.tfrecords'"),
    ("[z-a].tfrecords", "found '[z-a].tfrecords': bad character range z-a: expected a glob such as "
                        "'**/*.tfrecords'"),
    ("{a,b}" * 11, "found '" + "{{a,b}}" * 11 + "': its {{...}} groups spell 2,048 alternatives: expected at "
                   "most 1,024"),
])
def test_a_bad_pattern_or_one_matching_nothing_is_located(tmp_path, pattern, message):
    make_tree(tmp_path, NAMES)
    write_manifest(tmp_path / "data", FEATURES)
    config = config_file(tmp_path, {"type": "dir", "args": {"data_dir": str(tmp_path / "data"), "pattern": pattern}})
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert_problem(info.value, config, "pattern", message.format(d=tmp_path / "data"))


def test_without_a_pattern_no_data_file_names_the_default(tmp_path):
    make_tree(tmp_path, {"data/__manifest__.json": "manifest", "data/part-0.rec": "file"})
    config = dir_config(tmp_path, tmp_path / "data")
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert_problem(info.value, config, "data_dir", (
        "the pattern '**/*{.tfrecords,.tfrecord,.tfrec,-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]}"
        f"{{,.gz,.zz}}' matches no file under {tmp_path / 'data'}: expected at least one data file (give "
        "args.pattern when the files are named otherwise); found 1 other file: 'part-0.rec'; pattern: \"part-*.rec\" "
        "matches it"))


@pytest.mark.parametrize("name, tree, expected", ORDER, ids=[row[0] for row in ORDER])
def test_dir_dataset_files_in_component_order(tmp_path, name, tree, expected):
    make_tree(tmp_path, tree)
    write_manifest(tmp_path / "data", FEATURES)
    config = load_config(dir_config(tmp_path, tmp_path / "data"))
    assert list(config.dataset.files) == [os.path.join(str(tmp_path / "data"), rel) for rel in expected]


def test_dir_dataset_records_are_read_in_component_order(tmp_path):
    data = tmp_path / "data"
    write_manifest(data, FEATURES)
    order = ["a/m/deep.tfrecords", "a/m.tfrecords", "a/x.tfrecords", "a.tfrecords", "b.tfrecords", "c/d/e.tfrecords"]
    for i, rel in reversed(list(enumerate(order))):  # creation order must not matter
        write_records(data / rel, [example(id=("int", [i]))])
    cfg = loader_config(data, [("id", "id")], inputs=["id"], target_batch_size=len(order))
    assert [list(b["id"]) for b in collect(build_input_fn(cfg)())] == [list(range(len(order)))]


# ------------------------------------------------------------------------------------- dir: errors

DIR_ERRORS = [
    ("data_dir is a regular file", {"data": "file"},
     "found '{d}' ({d}), a regular file: expected an existing directory"),
    ("data_dir is a FIFO", {"data": "fifo"},
     "found '{d}' ({d}), a FIFO: expected an existing directory"),
    ("data_dir is a dangling symlink", {"data": "-> gone"},
     "found '{d}' ({d}), a dangling symlink to 'gone': expected an existing directory"),
    ("data_dir is a symlink loop", {"data": "-> data"},
     "found '{d}' ({d}), a symlink loop: expected an existing directory"),
    ("manifest is a directory", {"data/__manifest__.json": "dir", "data/a.tfrecords": "file"},
     "found __manifest__.json in {d}, a directory: expected the dataset manifest, a regular JSON file"),
    ("manifest is a dangling symlink", {"data/__manifest__.json": "-> old.json", "data/a.tfrecords": "file"},
     "found __manifest__.json in {d}, a dangling symlink to 'old.json': expected the dataset manifest, "
     "a regular JSON file"),
    ("a data file is a FIFO",
     {"data/__manifest__.json": "manifest", "data/a.tfrecords": "file", "data/sub/p.tfrecords": "fifo"},
     "found paths under {d} that cannot be read: 'sub/p.tfrecords' is a FIFO: " + WALK_EXPECTED),
    ("a data file is a dangling symlink",
     {"data/__manifest__.json": "manifest", "data/a.tfrecords": "file", "data/b.tfrecords": "-> gone.tfrecords"},
     "found paths under {d} that cannot be read: 'b.tfrecords' is a dangling symlink to 'gone.tfrecords': "
     + WALK_EXPECTED),
    ("a data file is a symlink loop",
     {"data/__manifest__.json": "manifest", "data/c.tfrecords": "-> c.tfrecords"},
     "found paths under {d} that cannot be read: 'c.tfrecords' is a symlink loop: " + WALK_EXPECTED),
    ("seven bad data files: five quoted in walk order, then a count",
     {"data/__manifest__.json": "manifest", **{f"data/s{i}/p{i}.tfrecords": "fifo" for i in range(7)}},
     "found paths under {d} that cannot be read: 's0/p0.tfrecords' is a FIFO; 's1/p1.tfrecords' is a FIFO; "
     "'s2/p2.tfrecords' is a FIFO; 's3/p3.tfrecords' is a FIFO; 's4/p4.tfrecords' is a FIFO; ... and 2 more: "
     + WALK_EXPECTED),
]


@pytest.mark.parametrize("name, tree, message", DIR_ERRORS, ids=[row[0] for row in DIR_ERRORS])
def test_dir_dataset_errors(tmp_path, name, tree, message):
    make_tree(tmp_path, tree)
    config = dir_config(tmp_path, tmp_path / "data")
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert_problem(info.value, config, "data_dir", message.format(d=tmp_path / "data"))


OUTSIDE = [
    ("a directory outside data_dir (it used to be walked)",
     {"outside/o.tfrecords": "file", "data/e2": "-> ../outside", "data/e1": "-> ../outside",
      "data/own.tfrecords": "file"},
     "'e1' is a symlink to a directory outside data_dir ('{t}/outside'): not followed; 'e2' is a symlink to a "
     "directory outside data_dir ('{t}/outside'): not followed"),
    ("the root directory (it used to walk the whole file system, /proc included)",
     {"data/own.tfrecords": "file", "data/sub/root": "-> /"},
     "'sub/root' is a symlink to a directory outside data_dir ('/'): not followed"),
    ("a data file outside data_dir",
     {"outside/o.tfrecords": "file", "data/o.tfrecords": "-> ../outside/o.tfrecords"},
     "'o.tfrecords' is a symlink to a regular file outside data_dir ('{t}/outside/o.tfrecords'): not followed"),
    ("a link out, reached through a link within (listed once, under its first name)",
     {"outside/o.tfrecords": "file", "data/in": "-> sub", "data/sub/out": "-> ../../outside"},
     "'in/out' is a symlink to a directory outside data_dir ('{t}/outside'): not followed"),
]


@pytest.mark.parametrize("name, tree, quoted", OUTSIDE, ids=[row[0] for row in OUTSIDE])
def test_symlinks_out_of_data_dir_are_not_followed(tmp_path, name, tree, quoted, monkeypatch):
    make_tree(tmp_path, {"data/__manifest__.json": "manifest", **tree})
    config = dir_config(tmp_path, tmp_path / "data")
    listed, scandir = [], os.scandir

    def recorded(path):
        listed.append(os.path.realpath(path))
        return scandir(path)

    monkeypatch.setattr(datasets.os, "scandir", recorded)
    with pytest.raises(ConfigError) as info:
        load_config(config)
    # The work of the walk: only directories of data_dir were listed (none outside it, / and /proc least of all).
    inside = os.path.realpath(tmp_path / "data")
    assert listed and all(p == inside or p.startswith(inside + os.sep) for p in listed), listed
    assert_problem(info.value, config, "data_dir", f"found paths under {tmp_path / 'data'} that cannot be read: "
                   + quoted.format(t=tmp_path) + ": " + WALK_EXPECTED.format())


def test_directory_that_cannot_be_listed_is_reported(tmp_path, monkeypatch):
    # As root every mode bit can be read through, so make os.scandir fail the way it does for a user.
    make_tree(tmp_path, {"data/__manifest__.json": "manifest", "data/a.tfrecords": "file",
                         "data/sub/locked/hidden.tfrecords": "file"})
    scandir = os.scandir

    def failing_scandir(path="."):
        if os.path.basename(os.fspath(path)) == "locked":
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", failing_scandir)
    config = dir_config(tmp_path, tmp_path / "data")
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert_problem(info.value, config, "data_dir", f"found paths under {tmp_path / 'data'} that cannot be read: "
                   f"directory 'sub/locked' cannot be listed (Permission denied): {WALK_EXPECTED.format()}")


# ------------------------------------------------------------------------------------- list: entries

def test_list_file_lines_comments_and_relative_entries(tmp_path):
    make_tree(tmp_path, {"lists/a.tfrecords": "file", "lists/sub/b.tfrecords": "file", "other/c.tfrecords": "file"})
    text = (f"\ufeff# data files\r\n\r\na.tfrecords\r\n  sub/b.tfrecords  \n{tmp_path}/other/c.tfrecords\n"
            "   # indented comment\n../other/c.tfrecords\ngs://bucket/d.tfrecords\n")
    (tmp_path / "lists" / "files.txt").write_text(text, encoding="utf-8")
    config = load_config(list_config(tmp_path, tmp_path / "lists" / "files.txt"))
    d = config.dataset
    assert d.files == (str(tmp_path / "lists/a.tfrecords"), str(tmp_path / "lists/sub/b.tfrecords"),
                       str(tmp_path / "other/c.tfrecords"), str(tmp_path / "other/c.tfrecords"),
                       "gs://bucket/d.tfrecords")  # a list is taken as written: repeats stay
    assert d.entry_lines == (3, 4, 5, 7, 8)
    assert d.list_file == str(tmp_path / "lists" / "files.txt")


LIST_ENTRY_ERRORS = [
    ("missing entry", {"ok.tfrecords": "file"}, "# header\n\nok.tfrecords\nmissing.tfrecords\n",
     "line 4: 'missing.tfrecords' does not exist"),
    ("entry is a directory", {"subdir": "dir"}, "subdir\n", "line 1: 'subdir' is a directory"),
    ("entry is a dangling symlink", {"broken.tfrecords": "-> gone.tfrecords"}, "broken.tfrecords\n",
     "line 1: 'broken.tfrecords' is a dangling symlink to 'gone.tfrecords'"),
    ("entry is a FIFO", {"pipe.tfrecords": "fifo"}, "\n\npipe.tfrecords", "line 3: 'pipe.tfrecords' is a FIFO"),
    ("entry is a symlink loop", {"loop.tfrecords": "-> loop.tfrecords"}, "loop.tfrecords\n",
     "line 1: 'loop.tfrecords' is a symlink loop"),
    ("entry goes through a file", {"ok.tfrecords": "file"}, "ok.tfrecords/x.tfrecords\n",
     "line 1: 'ok.tfrecords/x.tfrecords' is unreadable (Not a directory)"),
    ("several kinds, in line order", {"ok.tfrecords": "file", "d": "dir", "p": "fifo"},
     "ok.tfrecords\nd\n# p\np\nno.tfrecords\n",
     "line 2: 'd' is a directory; line 4: 'p' is a FIFO; line 5: 'no.tfrecords' does not exist"),
    ("a long entry is shortened in the middle", {}, "d/" + "x" * 300 + ".tfrecords\n",
     "line 1: '" + "d/" + "x" * 56 + "..." + "x" * 49 + ".tfrecords' does not exist"),
]


@pytest.mark.parametrize("name, tree, text, quoted", LIST_ENTRY_ERRORS, ids=[row[0] for row in LIST_ENTRY_ERRORS])
def test_list_entry_errors(tmp_path, name, tree, text, quoted):
    (tmp_path / "lists").mkdir()
    make_tree(tmp_path / "lists", tree)
    list_file = tmp_path / "lists" / "files.txt"
    list_file.write_text(text)
    config = list_config(tmp_path, list_file)
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert_problem(info.value, config, "list_file",
                   f"{list_file} names data files that cannot be read: {quoted}: {LIST_EXPECTED}")


def test_a_hundred_thousand_missing_entries_are_quoted_briefly(tmp_path):
    list_file = tmp_path / "files.txt"
    list_file.write_text("".join(f"part-{i:06d}.tfrecords\n" for i in range(100_000)))
    config = list_config(tmp_path, list_file)
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert_problem(info.value, config, "list_file",
                   f"{list_file} names data files that cannot be read: line 1: 'part-000000.tfrecords' does not "
                   "exist; line 2: 'part-000001.tfrecords' does not exist; line 3: 'part-000002.tfrecords' does not "
                   "exist; line 4: 'part-000003.tfrecords' does not exist; line 5: 'part-000004.tfrecords' does not "
                   f"exist; ... and 99995 more: {LIST_EXPECTED}")


# ------------------------------------------------------------------------------------- list: the list file itself

def _tfrecord_file(path):
    write_records(path, [b"x" * 20])  # a TFRecord starts with its length as 8 bytes: 0x14 then NULs


def _latin1_file(path):
    path.write_bytes(b"ok.tfrecords\ncaf\xe9.tfrecords\n")


def _long_line_file(path):
    path.write_bytes(b"ok.tfrecords\n" + b"a" * 5000 + b"\n")


def _huge_file(path):
    with open(path, "wb") as f:  # sparse: refused by its size, never read
        f.truncate(256 * 2**20 + 1)


LIST_FILE_ERRORS = [
    ("a TFRecord file as the list", _tfrecord_file,
     "found a binary file: {L} holds a NUL byte on line 1 (is it a data file?): " + TEXT_EXPECTED),
    ("not UTF-8", _latin1_file,
     "found bytes that are not UTF-8 text on line 2 of {L} (is it a data file?): " + TEXT_EXPECTED),
    ("a line longer than 4096 characters", _long_line_file,
     "found 5000 characters on line 2 of {L}: " + TEXT_EXPECTED + ", each at most 4096 characters"),
    ("larger than 256 MiB", _huge_file,
     "found {L} of 268435457 bytes: expected a list file of at most 256 MiB"),
    ("a FIFO", lambda path: os.mkfifo(path), "found '{L}' ({L}), a FIFO: expected a file"),
    ("a directory", lambda path: path.mkdir(), "found '{L}' ({L}), a directory: expected a file"),
    ("a dangling symlink", lambda path: os.symlink("moved.txt", path),
     "found '{L}' ({L}), a dangling symlink to 'moved.txt': expected a file"),
    ("missing", lambda path: None, "found '{L}' ({L}): no such list file"),
    ("only comments", lambda path: path.write_text("# nothing yet\n\n"),
     "{L} lists no data file: expected one path per line"),
]


@pytest.mark.parametrize("name, make, message", LIST_FILE_ERRORS, ids=[row[0] for row in LIST_FILE_ERRORS])
def test_list_file_errors(tmp_path, name, make, message):
    list_file = tmp_path / "lists" / "files.txt"
    list_file.parent.mkdir()
    make(list_file)
    config = list_config(tmp_path, list_file)
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert_problem(info.value, config, "list_file", message.format(L=list_file))


def test_list_file_size_limit_is_exact(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "MAX_LIST_BYTES", 100)
    make_tree(tmp_path, {"a.tfrecords": "file"})
    list_file = tmp_path / "files.txt"
    list_file.write_text("a.tfrecords\n" + "#" * 87 + "\n")  # 100 bytes: accepted
    assert len(load_config(list_config(tmp_path, list_file)).dataset.files) == 1
    list_file.write_text("a.tfrecords\n" + "#" * 88 + "\n")  # 101 bytes: refused
    config = list_config(tmp_path, list_file)
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert_problem(info.value, config, "list_file",
                   f"found {list_file} of 101 bytes: expected a list file of at most 100 bytes")


def test_list_file_entry_bound_counts_entries_not_comments(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "MAX_LIST_ENTRIES", 3)
    make_tree(tmp_path, {"a.tfrecords": "file"})
    list_file = tmp_path / "files.txt"
    list_file.write_text("# three entries\na.tfrecords\n\na.tfrecords\na.tfrecords\n")
    assert len(load_config(list_config(tmp_path, list_file)).dataset.files) == 3
    list_file.write_text("# four entries\na.tfrecords\n\na.tfrecords\na.tfrecords\n# fourth:\na.tfrecords\n")
    config = list_config(tmp_path, list_file)
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert_problem(info.value, config, "list_file",
                   f"found more than 3 data file entries in {list_file}, the first too many on line 7: expected at "
                   "most 3 (split the dataset, or make its files larger)")


def test_list_file_is_read_one_line_at_a_time(tmp_path):
    """64 MiB of comment lines: read in a bounded buffer, never whole (it used to be read, decoded and split:
    three copies of the file)."""
    import tracemalloc

    list_file = tmp_path / "files.txt"
    list_file.write_text(("#" * 4095 + "\n") * (16 * 1024))
    config = list_config(tmp_path, list_file)
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as info:
            load_config(config)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_problem(info.value, config, "list_file", f"{list_file} lists no data file: expected one path per line")
    assert peak < 8 * 2**20, f"{peak:,} bytes"


@pytest.mark.parametrize("make, message", [
    (lambda path: os.mkfifo(path), "found '{M}' ({M}), a FIFO: expected a file"),
    (lambda path: os.symlink("gone.json", path), "found '{M}' ({M}), a dangling symlink to 'gone.json': expected a file"),
], ids=["FIFO", "dangling symlink"])
def test_manifest_file_that_is_not_a_regular_file(tmp_path, make, message):
    make_tree(tmp_path, {"a.tfrecords": "file"})
    (tmp_path / "files.txt").write_text("a.tfrecords\n")
    manifest = tmp_path / "m.json"
    make(manifest)
    config = list_config(tmp_path, tmp_path / "files.txt", manifest)
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert_problem(info.value, config, "manifest_file", message.format(M=manifest))


# ------------------------------------------------------------------------------------- list: remote entries

def remote_config(tmp_path, text):
    make_tree(tmp_path, {"ok.tfrecords": "file"})
    (tmp_path / "files.txt").write_text(text)
    return list_config(tmp_path, tmp_path / "files.txt")


SCHEME_EXPECTED = LIST_EXPECTED + (" on a file system TensorFlow has (gs://, file://, ...; others may need a plugin "
                                   "such as tensorflow-io)")


def test_unsupported_url_scheme(tmp_path):
    config = remote_config(tmp_path, "ok.tfrecords\n# remote\nnosuchfs://bucket/a.tfrecords\n")
    load_config(config)  # without TensorFlow a URL cannot be checked
    with pytest.raises(ConfigError) as info:
        build_input_fn(config)
    assert_problem(info.value, config, "list_file",
                   f"{tmp_path / 'files.txt'} names data files that cannot be read: line 3: "
                   f"'nosuchfs://bucket/a.tfrecords': TensorFlow has no file system for scheme 'nosuchfs': "
                   + SCHEME_EXPECTED)


def test_unsupported_scheme_is_asked_about_once_and_quoted_briefly(tmp_path, monkeypatch):
    import tensorflow as tf

    calls = []
    stat = tf.io.gfile.stat
    monkeypatch.setattr(tf.io.gfile, "stat", lambda path: calls.append(path) or stat(path))
    config = remote_config(tmp_path, "".join(f"nosuchfs://b/{i}.tfrecords\n" for i in range(7)))
    with pytest.raises(ConfigError) as info:
        build_input_fn(config)
    assert calls == ["nosuchfs://b/0.tfrecords"]
    assert_problem(info.value, config, "list_file",
                   f"{tmp_path / 'files.txt'} names data files that cannot be read: "
                   + "; ".join(f"line {i + 1}: 'nosuchfs://b/{i}.tfrecords': TensorFlow has no file system for "
                               "scheme 'nosuchfs'" for i in range(5))
                   + "; ... and 2 more: " + SCHEME_EXPECTED)


def test_remote_entries_missing_or_directories(tmp_path):
    import tensorflow as tf

    root = f"ram://{tmp_path.name}"  # TensorFlow's in-memory file system stands in for a bucket
    tf.io.gfile.makedirs(f"{root}/dir")
    with tf.io.gfile.GFile(f"{root}/ok.tfrecords", "w") as f:
        f.write("")
    config = remote_config(tmp_path, f"{root}/ok.tfrecords\n{root}/gone.tfrecords\n\n{root}/dir\nok.tfrecords\n")
    with pytest.raises(ConfigError) as info:
        build_input_fn(config)
    assert_problem(info.value, config, "list_file",
                   f"{tmp_path / 'files.txt'} names data files that cannot be read: line 2: "
                   f"'{root}/gone.tfrecords' does not exist; line 4: '{root}/dir' is a directory: {LIST_EXPECTED}")


def test_other_tensorflow_errors_quote_the_first_line(tmp_path, monkeypatch):
    import tensorflow as tf

    def denied(path):
        raise tf.errors.PermissionDeniedError(None, None, "access denied to bucket 'b'\n\tat frame 1\n\tat frame 2")

    monkeypatch.setattr(tf.io.gfile, "stat", denied)
    config = remote_config(tmp_path, "ok.tfrecords\nram://b/a.tfrecords\n")
    with pytest.raises(ConfigError) as info:
        build_input_fn(config)
    assert_problem(info.value, config, "list_file",
                   f"{tmp_path / 'files.txt'} names data files that cannot be read: line 2: 'ram://b/a.tfrecords' "
                   f"cannot be checked: access denied to bucket 'b': {LIST_EXPECTED}")


def test_remote_and_local_entries_are_read_in_list_order(tmp_path):
    import tensorflow as tf

    remote = f"ram://{tmp_path.name}/r.tfrecords"
    with tf.io.TFRecordWriter(remote) as w:
        w.write(example(id=("int", [2])))
    write_records(tmp_path / "local.tfrecords", [example(id=("int", [1]))])
    (tmp_path / "files.txt").write_text(f"local.tfrecords\n{remote}\nlocal.tfrecords\n")
    config = list_config(tmp_path, tmp_path / "files.txt")
    assert [list(b["id"]) for b in collect(build_input_fn(config)())] == [[1, 2], [1]]  # target_batch_size 2
    assert load_config(config).dataset.entry_lines == (1, 2, 3)


# ------------------------------------------------------------------------------------- no TensorFlow

def test_resolving_datasets_does_not_import_tensorflow(tmp_path):
    make_tree(tmp_path, {"data/a.tfrecords": "file", "data/sub/loop": "-> .."})
    write_manifest(tmp_path / "data", FEATURES)
    (tmp_path / "files.txt").write_text("data/a.tfrecords\nnosuchfs://b/x.tfrecords\n")
    configs = [dir_config(tmp_path / "data", tmp_path / "data"), list_config(tmp_path, tmp_path / "files.txt")]
    code = textwrap.dedent(f"""
        import sys
        from batchloaders import load_config
        for path in {[str(c) for c in configs]!r}:
            load_config(path)
        assert "tensorflow" not in sys.modules, "resolving a dataset imported tensorflow"
    """)
    repo = pathlib.Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(repo)),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
