"""Resolve a config's ``dataset`` specifier into its manifest and data files (no TensorFlow).

``dir`` walks a directory: a local one with ``os``, a URL (``gs://``, ``ram://``) with ``tf.io.gfile``
(TensorFlow is imported then, and only then); ``list`` reads a list file whose entries may
be anything ``tf.io.gfile`` opens. Remote entries (with a URL scheme) are
checked when the pipeline is built (``sources.check_remote_files``), since
checking them needs TensorFlow.

Errors quote file contents briefly (:func:`quote_entries`): a list file of
100,000 missing entries names the first few, not all of them.
"""
from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import shlex
import stat
from collections import Counter
from typing import Callable, Iterator

from batchloaders.errors import ConfigError, ManifestError, Problem
from batchloaders.config.document import MANIFEST, Document, parse_text
from batchloaders.core.limits import MAX_LINE_CHARS, MAX_LIST_BYTES, MAX_LIST_ENTRIES  # noqa: F401 (tests patch)
from batchloaders.config.manifest import MANIFEST_NAME, is_sidecar, load_manifest, manifest_from_document
from batchloaders.core.model import CacheSpec, Dataset, RandomAccess, url_scheme  # noqa: F401 (url_scheme: imported from here)

# Data files of a dir dataset unless its args give a pattern: TFRecord files by their usual names, the shards
# TFDS, Beam and the TF models scripts write (NAME-SPLIT.tfrecord-00000-of-00002, train-00000-of-01024), and their
# compressed forms (whether they are compressed is the manifest's compression, not the name). Five digits each
# side, as those tools write them: a record index (.index), a JSON file or a temporary file never matches.
SHARD = "-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]"
DEFAULT_PATTERN = "**/*{.tfrecords,.tfrecord,.tfrec," + SHARD + "}{,.gz,.zz}"
# TensorFlow's checkpoint shards (ckpt-1.data-00000-of-00001) end like data shards; the default leaves them out.
CHECKPOINT_SHARD = re.compile(r"(?:.*/)?[^/]*\.data-[0-9]{5}-of-[0-9]{5}")
MAX_LISTED = 10  # files a pattern matching nothing lists of those that are there
# Names of a dataset's notes and metadata, never TFRecord data: a suggested pattern leaves them out.
_NOT_DATA = re.compile(r"(?i)(?:readme|license|licence|changelog|checkpoint)(?:\..*)?|.*\.(?:json|txt|md|rst|yaml|"
                       r"yml|py|ipynb|sh|html|csv|tsv|log|cfg|ini|toml|index|lock|tmp)")
MAX_ALTERNATIVES = 1024  # {a,b} groups multiply: a pattern must not spell millions of globs
MAX_QUOTED = 5  # entries an error quotes before "... and N more"
MAX_QUOTE_CHARS = 120  # an entry longer than this is quoted shortened

def shorten(text: str, limit: int = MAX_QUOTE_CHARS) -> str:
    """``text`` quoted, with its middle replaced by '...' when it is longer than ``limit`` characters."""
    if len(text) > limit:
        head = (limit - 3) // 2
        text = text[:head] + "..." + text[len(text) - (limit - 3 - head):]
    return repr(text)


def quote_entries(items: list[str], limit: int = MAX_QUOTED, total: int | None = None) -> str:
    """The first ``limit`` items joined by '; ', then '; ... and N more' if there are more (of ``total``)."""
    total = len(items) if total is None else total
    shown = "; ".join(items[:limit])
    return shown + (f"; ... and {total - limit} more" if total > limit else "")


def _kind(path: str) -> tuple[str, os.stat_result | None]:
    """What ``path`` is, following symlinks: ("file", st), ("directory", st) or (description, None|st)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.lexists(path):
            try:
                return f"a dangling symlink to {shorten(os.readlink(path))}", None
            except OSError:
                return "a dangling symlink", None
        return "missing", None
    except ValueError:  # an embedded NUL character
        return "not a valid path", None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symlink loop", None
        return f"unreadable ({e.strerror})", None
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return "file", st
    if stat.S_ISDIR(mode):
        return "directory", st
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name, st
    return "a special file", st


def _article(kind: str) -> str:
    return {"file": "a regular file", "directory": "a directory"}.get(kind, kind)


def resolve(spec: dict, doc: Document) -> Dataset:
    """Find the manifest and data files a dataset specifier names; raise ConfigError/ManifestError."""
    kind, args = spec["type"], spec["args"]
    base = doc.base_dir

    def config_line(key: str) -> int | None:
        return doc.line_of(("args", "dataset", "args", key))

    def fail(key: str, message: str):
        raise ConfigError(doc.problem(("args", "dataset", "args", key), message))

    if kind == "dir":
        dataset = _resolve_dir(args, base, fail)
    else:
        dataset = _resolve_list(args, base, fail, config_line("list_file"))
    return dataclasses.replace(dataset, access=_access(args, base, fail))


def _access(args: dict, base: str, fail) -> RandomAccess:
    """The dataset args that say how records are read at their offsets (schema-checked), paths resolved: a
    local ``index_dir`` or ``cache.dir`` against the config's directory, a URL ``index_dir`` kept."""
    index_dir = args.get("index_dir")
    if index_dir is not None and url_scheme(index_dir) is None:
        index_dir = _local_path(args, "index_dir", base, fail)
    cache = args.get("cache")
    if cache is not None:
        cache = CacheSpec(_local_path(cache, "dir", base, lambda _, message: fail("cache", message)),
                          int(cache["max_bytes"]))
    return RandomAccess(index_dir=index_dir, random_access=args.get("random_access", "auto"),
                        reads_in_flight=int(args.get("reads_in_flight", 16)), cache=cache)


def _local_path(args: dict, key: str, base: str, fail) -> str:
    """args[key] resolved against ``base``; a name no file system accepts is a located error."""
    try:
        return os.path.normpath(os.path.join(base, os.path.expanduser(args[key])))
    except (ValueError, UnicodeError) as e:  # a NUL byte or a lone surrogate, e.g. in "~\\0"
        fail(key, f"found {shorten(args[key])!r}, which is not a valid path ({e}): expected a file system path")


def _resolve_dir(args: dict, base: str, fail) -> Dataset:
    if url_scheme(args["data_dir"]) is not None:
        return _resolve_url_dir(args, fail)
    data_dir = _local_path(args, "data_dir", base, fail)
    what, top = _kind(data_dir)
    if what == "missing":
        fail("data_dir", f"found {args['data_dir']!r} ({data_dir}): expected an existing directory")
    if what != "directory":
        fail("data_dir", f"found {args['data_dir']!r} ({data_dir}), {_article(what)}: expected an existing directory")
    manifest_path = os.path.join(data_dir, MANIFEST_NAME)
    what, _ = _kind(manifest_path)
    if what == "missing":
        fail("data_dir", f"no {MANIFEST_NAME} in {data_dir}: expected the dataset manifest at the top "
                         "level of data_dir")
    if what != "file":
        fail("data_dir", f"found {MANIFEST_NAME} in {data_dir}, {_article(what)}: expected the dataset "
                         "manifest, a regular JSON file")
    pattern = args.get("pattern", DEFAULT_PATTERN)
    try:
        match = pattern_matcher(pattern)
    except ValueError as e:
        fail("pattern", f"found {shorten(pattern)}: {e}")
    files, problems = _walk(data_dir, top, match)
    if problems:
        fail("data_dir", f"found paths under {data_dir} that cannot be read: {quote_entries(problems)}: expected "
                         f"every entry the pattern {pattern!r} matches to be a regular file and every directory "
                         "to be listable, both within data_dir")
    if not files:
        there = files_there(data_dir, lambda suggested: f"pattern: {json.dumps(suggested)}")
        fail("pattern" if "pattern" in args else "data_dir",
             f"the pattern {pattern!r} matches no file under {data_dir}: expected at least one data file"
             + ("" if "pattern" in args else " (give args.pattern when the files are named otherwise)")
             + (f"; {there}" if there else ""))
    return Dataset("dir", load_manifest(manifest_path), tuple(files), pattern=pattern)


def _resolve_url_dir(args: dict, fail) -> Dataset:
    """A dir dataset whose data_dir is a URL: its manifest and the files the pattern matches, listed with
    tf.io.gfile in the order a local directory's are (sorted by their relative path's components)."""
    import tensorflow as tf  # (not a package module) only a URL data_dir needs TensorFlow's file systems

    data_dir = args["data_dir"].rstrip("/")
    try:
        if not tf.io.gfile.isdir(data_dir):
            what = "a file" if tf.io.gfile.exists(data_dir) else "missing"
            fail("data_dir", f"found {args['data_dir']!r} ({what}): expected an existing directory")
        manifest_path = data_dir + "/" + MANIFEST_NAME
        if not tf.io.gfile.exists(manifest_path):
            fail("data_dir", f"no {MANIFEST_NAME} in {data_dir}: expected the dataset manifest at the top "
                             "level of data_dir")
        pattern = args.get("pattern", DEFAULT_PATTERN)
        try:
            match = pattern_matcher(pattern)
        except ValueError as e:
            fail("pattern", f"found {shorten(pattern)}: {e}")
        files = _url_walk(tf.io.gfile, data_dir, match)
    except tf.errors.OpError as e:
        said = (e.message or type(e).__name__).strip().splitlines()[0][:200]
        fail("data_dir", f"found {args['data_dir']!r}, which TensorFlow cannot list ({said}): expected an existing "
                         "directory on a file system TensorFlow reads")
    if not files:
        fail("pattern" if "pattern" in args else "data_dir",
             f"the pattern {pattern!r} matches no file under {data_dir}: expected at least one data file"
             + ("" if "pattern" in args else " (give args.pattern when the files are named otherwise)"))
    return Dataset("dir", _url_manifest(tf.io.gfile, manifest_path), tuple(files), pattern=pattern)


def _url_walk(gfile, data_dir: str, match: Callable[[str], bool]) -> list[str]:
    """The files under URL ``data_dir`` whose relative path ``match`` accepts, record indexes left out, in
    sorted order of their relative path's components (depth first, entries in name order)."""
    out: list[str] = []
    stack = [(data_dir, (), iter(sorted(name.rstrip("/") for name in gfile.listdir(data_dir))))]
    while stack:
        top, rel, names = stack[-1]
        name = next(names, None)
        if name is None:
            stack.pop()
            continue
        path = top + "/" + name
        if gfile.isdir(path):
            stack.append((path, rel + (name,), iter(sorted(entry.rstrip("/") for entry in gfile.listdir(path)))))
        elif match("/".join(rel + (name,))) and not is_sidecar(name):
            out.append(path)
    return out


def _url_manifest(gfile, path: str):
    """The manifest at URL ``path``, read and checked as a local one is (ManifestError naming what is wrong)."""
    size = gfile.stat(path).length
    if size > MANIFEST.max_bytes:
        raise ManifestError(Problem(path, "$", f"found a file of {size:,} bytes: expected a {MANIFEST.kind} of at "
                                               f"most {MANIFEST.max_bytes // 2**20} MiB (is this a data file?)"))
    with gfile.GFile(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ManifestError(Problem(path, "$", f"found bytes that are not UTF-8 text at byte {e.start}: expected a "
                                               "UTF-8 text file (is this a data file?)")) from None
    return manifest_from_document(parse_text(text, path, ManifestError, base_dir=path.rsplit("/", 1)[0],
                                             fmt="json", bounds=MANIFEST))


def command_option(pattern: str) -> str:
    """``--pattern 'train-*'``: ``pattern`` as the commands take it."""
    return f"--pattern {shlex.quote(pattern)}"


def files_there(data_dir: str, option: Callable[[str], str] = command_option) -> str:
    """What the error of a pattern matching no file under ``data_dir`` adds: the files there, and a pattern for them.

    Args:
        data_dir: the directory the pattern was matched under.
        option: how the suggested pattern is written for the command that prints it (``--pattern 'x-*'``).

    Returns:
        '' when the directory holds no file (its manifest aside); else "found 3 other files: 'a-0.bin',
        'a-1.bin', 'notes.txt'; --pattern 'a-*.bin' matches 2 of them", the first MAX_LISTED files named.
    """
    try:
        found, _ = _walk(data_dir, os.stat(data_dir), lambda relative: True)
    except OSError:
        return ""
    names = [os.path.relpath(path, data_dir).replace(os.sep, "/") for path in found]
    names = [name for name in names if name != MANIFEST_NAME and not name.startswith(".") and "/." not in name]
    if not names:
        return ""
    shown = ", ".join(shorten(name) for name in names[:MAX_LISTED])
    text = (f"found {len(names):,} other file{'s' * (len(names) > 1)}"
            + (f", the first {MAX_LISTED}" if len(names) > MAX_LISTED else "") + f": {shown}")
    suggested = suggest_pattern(names)
    if suggested is not None:
        matched = sum(map(pattern_matcher(suggested), names))
        text += f"; {option(suggested)} matches " + ("it" if len(names) == 1 else "them all" if matched == len(names)
                                                     else f"{matched:,} of them")
    return text


def suggest_pattern(names: list[str]) -> str | None:
    """A pattern for the data files among ``names`` (paths relative to data_dir): their names with each run of
    digits a ``*``, notes and metadata (README, *.json, *.txt, ...) left out; None when only those are there."""
    candidates = [name for name in names if not _NOT_DATA.fullmatch(name.rsplit("/", 1)[-1])]
    if not candidates:
        return None
    shapes = Counter(re.sub(r"\*+", "*", re.sub(r"[0-9]+", "*", re.sub(r"[][{}*?,]", "?", name.rsplit("/", 1)[-1])))
                     for name in candidates)
    if len(shapes) > 3:  # names of many shapes: by their extensions, the most common first
        extensions = Counter(os.path.splitext(shape)[1] for shape in shapes.elements())
        if "" not in extensions:
            shapes = Counter({"*" + extension: n for extension, n in extensions.items()})
    common = sorted(shape for shape, _ in sorted(shapes.items(), key=lambda item: (-item[1], item[0]))[:3])
    body = common[0] if len(common) == 1 else "{" + ",".join(common) + "}"
    try:
        pattern_matcher(body)
    except ValueError:
        return None
    return body if all("/" not in name for name in candidates) else "**/" + body


def unlisted_files(dataset: Dataset) -> list[str]:
    """The data files of a ``dir`` dataset that its pattern matches but its manifest's ``files`` does not list.

    Their records are read, but not counted or checked against the manifest: files added after the manifest
    was written. A list dataset names its files itself: none.

    Args:
        dataset: a resolved dataset.

    Returns:
        The paths, in the order the dataset reads them; empty when the manifest has no ``files``.
    """
    if dataset.type != "dir" or not dataset.manifest.files:
        return []
    return [path for path in dataset.files if dataset.manifest.entry(path) is None]


def pattern_matcher(pattern: str):
    """A function telling whether a path relative to data_dir ('a/b/x.tfrecords') matches ``pattern``.

    Glob syntax on the relative path with '/' between components: ``*`` and ``?`` within one
    component, ``**/`` any number of directories (none included), ``[abc]``/``[!abc]`` one character,
    ``{a,b}`` alternatives. ValueError for an unbalanced ``{`` or ``[``.
    """
    if not pattern or pattern.startswith("/"):
        raise ValueError("expected a pattern relative to data_dir, such as '**/*.tfrecords'")
    alternatives = 1
    for group in re.findall(r"\{([^{}]*)\}", pattern):
        alternatives *= group.count(",") + 1
    if alternatives > MAX_ALTERNATIVES:
        raise ValueError(f"its {{...}} groups spell {alternatives:,} alternatives: expected at most "
                         f"{MAX_ALTERNATIVES:,}")
    try:
        regex = re.compile("|".join(f"(?:{_glob_regex(p)})" for p in _braces(pattern)))
    except re.error as e:  # e.g. a character range backwards, [z-a]
        raise ValueError(f"{e.msg}: expected a glob such as '**/*.tfrecords'") from None
    if pattern == DEFAULT_PATTERN:
        return lambda relative: regex.fullmatch(relative) is not None and not CHECKPOINT_SHARD.fullmatch(relative)
    return lambda relative: regex.fullmatch(relative) is not None


def _braces(pattern: str) -> list[str]:
    start = pattern.find("{")
    if start < 0:
        if "}" in pattern:
            raise ValueError("found '}' without '{': expected {alternative,alternative}")
        return [pattern]
    end = pattern.find("}", start)
    if end < 0:
        raise ValueError("found '{' without '}': expected {alternative,alternative}")
    head, tail = pattern[:start], pattern[end + 1:]
    if "}" in head:
        raise ValueError("found '}' without '{': expected {alternative,alternative}")
    return [head + alt + rest for alt in pattern[start + 1:end].split(",") for rest in _braces(tail)]


def _glob_regex(pattern: str) -> str:
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:[^/]+/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = pattern.find("]", i + 2)
            if end < 0:
                raise ValueError("found '[' without ']': expected a character class such as [0-9]")
            body = pattern[i + 1:end]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            # A lone '-' between two characters is a range; anything else is that character.
            inner = "".join("-" if c == "-" and 0 < j < len(body) - 1 and "-" not in (body[j - 1], body[j + 1])
                            else re.escape(c) for j, c in enumerate(body))
            out.append("[" + ("^" if negate else "") + inner + "]")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def _walk(data_dir: str, top: os.stat_result, match=None) -> tuple[list[str], list[str]]:
    """Every data file under ``data_dir`` (a relative path ``match`` accepts; by default the
    DEFAULT_PATTERN) in sorted order of its relative path's components.

    Symlinks within data_dir are followed, but each real directory is listed once
    and each real file (same device and inode) is included once: the first
    occurrence in that order wins, so a symlink loop ends at the directory it
    points back to. A symlink out of data_dir is not followed (the walk stays in
    the dataset: a link to / would walk the whole file system, /proc included)
    and is a problem when it is a directory or a file the pattern matches, so
    that no data goes missing without a word (a list dataset names files anywhere).
    Record indexes (``*.index``) and their temporary files are never data files, whatever ``match`` says.
    A matched file whose path is not UTF-8 is a problem (:func:`not_utf8`): TensorFlow cannot open it.
    Returns the files and a description of each path that cannot be read.
    """
    walk = _Walk(os.path.realpath(data_dir), match or pattern_matcher(DEFAULT_PATTERN), {(top.st_dev, top.st_ino)})
    # Depth first, children in name order, files and directories mixed: a pre-order walk visits
    # relative paths in the order of their component tuples, ('a', 'x.tfrecords') < ('a.tfrecords',).
    stack = [walk.listing(data_dir, ())]
    while stack:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
            continue
        below = walk.visit(*item)
        if below is not None:
            stack.append(below)
    return walk.files, walk.problems


@dataclasses.dataclass
class _Walk:
    """What one :func:`_walk` has found so far: the data files, the problems, the real directories and files
    seen (by device and inode)."""

    root: str  # data_dir's real path
    match: Callable[[str], bool]
    seen_dirs: set[tuple[int, int]]
    seen_files: set[tuple[int, int]] = dataclasses.field(default_factory=set)
    files: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)

    def listing(self, path: str, rel: tuple[str, ...]):
        """(path, relative components) of each entry of directory ``path``, in name order."""
        try:
            with os.scandir(path) as it:
                names = sorted(entry.name for entry in it)
        except OSError as e:
            self.problems.append(f"directory {shorten(os.path.join(*rel) if rel else '.')} cannot be listed "
                                 f"({e.strerror or e})")
            return iter(())
        return iter([(os.path.join(path, name), rel + (name,)) for name in names])

    def visit(self, path: str, rel: tuple[str, ...]):
        """Take in one entry; the listing of a directory not seen before, to walk next (else None)."""
        what, st = _kind(path)
        outside = _outside(path, self.root) if st is not None else None
        if outside is not None:
            if what == "directory" or self.match("/".join(rel)):
                self.problems.append(f"{shorten(os.path.join(*rel))} is a symlink to {_article(what)} outside "
                                     f"data_dir ({shorten(outside)}): not followed")
        elif what == "directory":
            key = (st.st_dev, st.st_ino)
            if key not in self.seen_dirs:
                self.seen_dirs.add(key)
                return self.listing(path, rel)
        elif self.match("/".join(rel)) and not is_sidecar(rel[-1]):  # record indexes sit beside their data files
            self._matched(path, rel, what, st)
        return None

    def _matched(self, path: str, rel: tuple[str, ...], what: str, st) -> None:
        """A path the pattern matches: a data file (each real file once), or a problem."""
        if what == "file" and not_utf8(path):
            self.problems.append(not_utf8(os.path.join(*rel)) or not_utf8(path))  # the name, else data_dir's
        elif what == "file":
            key = (st.st_dev, st.st_ino)
            if key not in self.seen_files:
                self.seen_files.add(key)
                self.files.append(path)
        else:
            self.problems.append(f"{shorten(os.path.join(*rel))} " + ("vanished during the walk" if what == "missing"
                                                                      else f"is {_article(what)}"))


def not_utf8(path: str) -> str | None:
    """What is wrong with a path whose name is not UTF-8 (None when it is UTF-8).

    Linux lists a name holding bytes that are not UTF-8 as a str with surrogates
    ('part-\\udcff.tfrecord'); TensorFlow opens files by UTF-8 names only, so it cannot open one.

    Args:
        path: a path as ``os.listdir`` or ``os.path.join`` gives it.

    Returns:
        None, or the problem naming the path by its bytes and saying what to do.
    """
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return (f"{os.fsencode(path)!r} is named with bytes that are not UTF-8 (TensorFlow opens files by UTF-8 "
                "names only): rename it")
    return None


def within(path: str, directory: str) -> bool:
    """Whether ``path`` is ``directory`` or lies below it, symlinks of both resolved."""
    real, root = os.path.realpath(path), os.path.realpath(directory)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _outside(path: str, root: str) -> str | None:
    """Where the symlink ``path`` leads when that is outside the directory ``root``; None otherwise."""
    if not os.path.islink(path):
        return None  # its directory is within root, so it is too
    return None if within(path, root) else os.path.realpath(path)


def _resolve_list(args: dict, base: str, fail, list_file_line: int | None) -> Dataset:
    manifest_path = _local_path(args, "manifest_file", base, fail)
    list_path = _local_path(args, "list_file", base, fail)
    for key, path, name in (("manifest_file", manifest_path, "manifest file"), ("list_file", list_path, "list file")):
        what, _ = _kind(path)
        if what == "missing":
            fail(key, f"found {args[key]!r} ({path}): no such {name}")
        if what != "file":
            fail(key, f"found {args[key]!r} ({path}), {_article(what)}: expected a file")

    files, numbers, bad, bad_count = [], [], [], 0
    list_dir = os.path.dirname(list_path)
    for number, line in _read_list(list_path, lambda message: fail("list_file", message)):
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        if len(files) == MAX_LIST_ENTRIES:
            fail("list_file", f"found more than {MAX_LIST_ENTRIES:,} data file entries in {list_path}, the first "
                              f"too many on line {number}: expected at most {MAX_LIST_ENTRIES:,} (split the "
                              "dataset, or make its files larger)")
        if url_scheme(entry) is None:
            raw, entry = entry, os.path.normpath(os.path.join(list_dir, os.path.expanduser(entry)))
            what, _ = _kind(entry)
            if what != "file":
                bad_count += 1
                if len(bad) < MAX_QUOTED:  # only these are quoted
                    bad.append(f"line {number}: {shorten(raw)} " + ("does not exist" if what == "missing" else
                                                                      f"is {_article(what)}"))
        files.append(entry)
        numbers.append(number)
    if bad:
        fail("list_file", f"{list_path} names data files that cannot be read: {quote_entries(bad, total=bad_count)}: "
                          "expected "
                          "every entry to name an existing regular file")
    if not files:
        fail("list_file", f"{list_path} lists no data file: expected one path per line")
    return Dataset("list", load_manifest(manifest_path), tuple(files), list_file=list_path,
                   entry_lines=tuple(numbers), list_file_line=list_file_line)


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n % 2**20 == 0 else f"{n} bytes"


def _read_list(list_path: str, fail) -> Iterator[tuple[int, str]]:
    """(number, text) of each line of a list file, read one line at a time; anything that is not a bounded
    UTF-8 text list fails at its first line that is not, without quoting it."""
    expected = "expected a text file with one data file path per line"
    try:
        # O_NONBLOCK: a FIFO swapped in after the check above must not block the open.
        fd = os.open(list_path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as e:
        fail(f"cannot open {list_path} ({e.strerror}): {expected}")
    with os.fdopen(fd, "rb") as f:
        try:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                fail(f"found {list_path}, not a regular file: {expected}")
            if st.st_size > MAX_LIST_BYTES:
                fail(f"found {list_path} of {st.st_size} bytes: expected a list file of at most "
                     f"{_size(MAX_LIST_BYTES)}")
            read, number = 0, 0
            # A line of MAX_LINE_CHARS characters takes at most 4 bytes each, and its '\n'.
            while raw := f.readline(4 * MAX_LINE_CHARS + 1):
                number += 1
                read += len(raw)
                if read > MAX_LIST_BYTES:  # it grew since fstat
                    fail(f"found {list_path} of more than {MAX_LIST_BYTES} bytes: expected a list file of at most "
                         f"{_size(MAX_LIST_BYTES)}")
                yield number, _line_text(raw, number, list_path, expected, fail)
        except OSError as e:
            fail(f"cannot read {list_path} ({e.strerror}): {expected}")


def _line_text(raw: bytes, number: int, list_path: str, expected: str, fail) -> str:
    """One line of a list file as text (without its '\n'; a BOM before line 1 dropped), or fail."""
    if b"\0" in raw:
        fail(f"found a binary file: {list_path} holds a NUL byte on line {number} (is it a data file?): {expected}")
    if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    cut = not raw.endswith(b"\n") and len(raw) > 4 * MAX_LINE_CHARS
    try:
        # Only '\n' ends a line ('\r\n' too), so line numbers are the ones an editor shows.
        text = raw.removesuffix(b"\n").decode("utf-8", errors="ignore" if cut else "strict")
    except UnicodeDecodeError:
        fail(f"found bytes that are not UTF-8 text on line {number} of {list_path} (is it a data file?): {expected}")
    if cut or len(text) > MAX_LINE_CHARS:
        found = f"more than {MAX_LINE_CHARS}" if cut else f"{len(text)}"
        fail(f"found {found} characters on line {number} of {list_path}: {expected}, each at most "
             f"{MAX_LINE_CHARS} characters")
    return text


__all__ = ["resolve", "url_scheme", "shorten", "quote_entries", "ManifestError"]
