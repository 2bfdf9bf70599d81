"""The shuffle args as a ShuffleOptions, and what ``args.shuffle_scope: global`` needs of the config and the
dataset.

A global shuffle reads records at their byte offsets (read/global_order.py, read/offset_reader.py):
it needs an index of every data file, uncompressed files (local, or read through TensorFlow's file systems:
the dataset's ``random_access``), and examples whose records the record
counts locate (records, or windows of one size). The indexes themselves are checked against their data
files when the pipeline is built.
"""
from __future__ import annotations

import dataclasses
import os

from batchloaders.errors import ManifestError
from batchloaders.config.datasets import url_scheme
from batchloaders.config.index_manifest import INDEX_MANIFEST_NAME, data_name, index_manifest_path, load_index_manifest
from batchloaders.config.kinds import kind
from batchloaders.config.sections.context import SectionContext
from batchloaders.config.stage_rules import flagged
from batchloaders.core.model import CacheSpec, ShuffleOptions

AT = ("args", "shuffle_scope")
CACHE_AT = ("args", "dataset", "args", "cache")
ACCESS_AT = ("args", "dataset", "args", "random_access")
INDEX_DIR_AT = ("args", "dataset", "args", "index_dir")
_SHOWN = 3  # files named in a message about several


def default_resume(args, regrouped) -> str:
    """The ``resume`` of a config that gives none: ``replay`` for a global shuffle batched as the examples come
    (no regroup stage) and read in order (no sloppy_interleave), where the position of the run's order is the
    whole state and a restore starts reading there at once; else ``state``.

    Args:
        args: the config's ``args`` mapping.
        regrouped: the regroup blocks by name, each its spec or None.

    Returns:
        ``"replay"`` or ``"state"``.
    """
    positional = (bool(args.get("shuffle", False)) and args.get("shuffle_scope", "buffer") == "global"
                  and not any(spec is not None for spec in regrouped.values())
                  and not args.get("sloppy_interleave", False))
    return "replay" if positional else "state"


def shuffle_options(ctx: SectionContext) -> ShuffleOptions:
    """The config's shuffle args, defaults filled in.

    Args:
        ctx: the checked config's context (its args passed the schema).

    Returns:
        Its ShuffleOptions; ``scope`` is the config's ``shuffle_scope``.
    """
    keys = {f.metadata.get("key", f.name): f.name for f in dataclasses.fields(ShuffleOptions)}
    return ShuffleOptions(**{name: ctx.args[key] for key, name in keys.items() if key in ctx.args})


def check_shuffle_scope(ctx: SectionContext) -> None:
    _check_window_files(ctx)
    check_cache_use(ctx)
    if ctx.value("shuffle_scope", default="buffer") != "global":
        return
    needs = "shuffle_scope global reads every record at its byte offset"
    if not ctx.value("shuffle", default=False):
        ctx.check(AT, "found global with shuffle false: nothing is shuffled; expected shuffle true (or no "
                      "shuffle_scope)")
    if not kind(ctx.loader_type).global_order:
        ctx.check(AT, f"found global, but the {ctx.loader_type} loader has no global order (it cannot count an "
                      "epoch's examples from the record counts); expected shuffle_scope buffer")
        return
    if kind(ctx.loader_type).sequence:
        _check_windows(ctx)
    regroup = next((stage.name for stage in flagged("keeps_file_order") if ctx.given(stage.name)), None)
    if regroup is not None:
        ctx.check(AT, f"found global with {regroup}: {regroup} works on each sequence's records in file order, "
                      "which a global shuffle takes apart; expected shuffle_scope buffer")
    if ctx.given("service"):
        ctx.check(AT, f"found global with a service block: {needs} in this process with a Python function over the "
                      "files, which a tf.data service worker cannot run; expected shuffle_scope buffer with a "
                      "service")
    if ctx.value("on_corrupt", default="fail") == "skip_file":
        ctx.check(AT, f"found global with on_corrupt skip_file: {needs}, so there is no rest of a file to skip "
                      "past a damaged record; expected on_corrupt fail (a damaged record stops the run, naming it)")
    _check_files(ctx, needs)


def _check_window_files(ctx: SectionContext) -> None:
    """``shuffle_window_files`` cuts a global shuffle's permuted files into windows: with another scope there is
    no such order to cut (``shuffle: false`` under ``global`` is check_shuffle_scope's to report)."""
    window = ctx.value("shuffle_window_files")
    scope = ctx.value("shuffle_scope", default="buffer")
    if window is None or scope == "global":
        return
    given = "" if ctx.given("shuffle_scope") else " (the default)"
    ctx.check(("args", "shuffle_window_files"), (
        f"found {window} with shuffle_scope {scope}{given}: shuffle_window_files cuts a global shuffle's "
        "permutation of the files into windows, which this scope does not draw; expected shuffle_scope global "
        "beside it, or no shuffle_window_files"))


def _check_windows(ctx: SectionContext) -> None:
    """A global shuffle permutes windows whose records it can name from the record counts: windows of one
    size, and for continuous_sequence records of one length along the time axis."""
    lo, hi = ctx.value("min_window"), ctx.value("max_window")
    if isinstance(lo, int) and isinstance(hi, int) and lo != hi:
        ctx.check(AT, f"found global with min_window {lo} != max_window {hi}: a global shuffle permutes the windows "
                      "of an epoch, which needs every window's place known from the record counts; expected "
                      "min_window equal to max_window")
    if not kind(ctx.loader_type).concatenates_records or ctx.manifest is None:
        return
    lists = [p["from_name"] for _, p in ctx.items("primary_features")
             if (f := ctx.manifest.features.get(p["from_name"])) is not None and f.steps_per_record is None]
    if lists:
        ctx.check(AT, f"found global for a continuous_sequence loader whose feature(s) {', '.join(map(repr, lists))} "
                      "have no fixed number of steps per record (feature lists, or shapes that begin with null): a "
                      "window's records are found from the steps per record, which the index does not hold; expected "
                      "shuffle_scope buffer, or features of a fixed shape")


def _check_files(ctx: SectionContext, needs: str) -> None:
    if ctx.dataset is None or ctx.manifest is None:
        return
    if ctx.dataset.access.cache is not None:
        _check_cached(ctx, needs)
        return
    if ctx.manifest.compression is not None:
        ctx.check(AT, f"found global, but the manifest {ctx.manifest.path} says the files are "
                      f"{ctx.manifest.compression.upper()}-compressed: {needs}, and an offset into a compressed "
                      "stream means nothing without the stream before it; expected a local cache that holds them "
                      "decompressed (args.dataset.args.cache: {dir: PATH, max_bytes: N}), uncompressed files "
                      "(`batchloaders reshard SRC DEST --shards N` writes them, indexed), or shuffle_scope buffer")
        return
    remote = [path for path in ctx.dataset.files if url_scheme(path) is not None]
    if remote and ctx.dataset.access.random_access == "local":
        ctx.check(ACCESS_AT, f"found local with shuffle_scope global, but {_some(remote)} are not on the local file "
                             f"system: {needs} with os.pread, which reads local files only; expected filesystem or "
                             "auto (TensorFlow's file systems read them)")
        return
    index_dir = ctx.dataset.access.index_dir
    if index_dir is not None:
        _check_index_dir(ctx, index_dir, needs)
        return
    unindexed = [path for path in ctx.dataset.files
                 if (entry := ctx.manifest.entry(path)) is None or entry.index is None]
    if unindexed:
        ctx.check(AT, f"found global, but the manifest {ctx.manifest.path} records no index for {_some(unindexed)}: "
                      f"{needs}, which the index gives; expected an index beside every data file: run "
                      "`batchloaders index` on the dataset's directory (or on this config)")


def _check_cached(ctx: SectionContext, needs: str) -> None:
    """Through a cache, each file's offsets come from its local copy (no index needed, compressed files too),
    and its record count from the manifest, which must list every file."""
    unlisted = [path for path in ctx.dataset.files if ctx.manifest.entry(path) is None]
    if unlisted:
        ctx.check(CACHE_AT, f"found a cache with shuffle_scope global, but the manifest {ctx.manifest.path} lists no "
                            f"entry for {_some(unlisted)}: {needs}, and places each file's records in an epoch from "
                            "the manifest's record counts before the file is copied; expected every data file "
                            "listed (`batchloaders manifest` on the dataset's directory writes the entries)")
        return
    cache = ctx.dataset.access.cache
    if ctx.manifest.compression is None:  # (a compressed file's size once decompressed is known when it is copied)
        sizes = {path: CacheSpec.copy_bytes(e.size_bytes, e.num_records) for path in ctx.dataset.files
                 if (e := ctx.manifest.entry(path)).size_bytes is not None}
        largest = max(sizes, key=sizes.get, default=None)
        if largest is not None and sizes[largest] > cache.max_bytes:
            ctx.check(CACHE_AT + ("max_bytes",), f"found {cache.max_bytes:,}, but the copy of data file {largest} "
                                                 f"takes {sizes[largest]:,} bytes in the cache (with its index): "
                                                 f"expected at least {sizes[largest]:,} (and room for the files "
                                                 "read at once: with shuffle_window_files K, about 2 K files)")


def check_cache_use(ctx: SectionContext) -> None:
    """A cache serves a global shuffle's reads: elsewhere it would be ignored, and so would random_access and
    index_dir beside it (the copies are local files, indexed as they are copied). ``cache.dir`` is local."""
    if ctx.dataset is None or ctx.dataset.access.cache is None:
        return
    cache = ctx.dataset.access.cache
    if url_scheme(ctx.value("dataset", "args", "cache", "dir", default="") or "") is not None:
        ctx.check(CACHE_AT + ("dir",), f"found {ctx.value('dataset', 'args', 'cache', 'dir')}: the cache holds "
                                       "local copies, read with the operating system's positional reads; expected "
                                       "a local directory")
    if not (ctx.value("shuffle", default=False) and ctx.value("shuffle_scope", default="buffer") == "global"):
        ctx.check(CACHE_AT, "found a cache, but only shuffle_scope global (with shuffle true) reads through it (a "
                            "buffer shuffle reads each file from its start); expected shuffle: true with "
                            "shuffle_scope: global, or no cache")
    if ctx.value("dataset", "args", "index_dir") is not None:
        ctx.check(INDEX_DIR_AT, f"found {ctx.value('dataset', 'args', 'index_dir')} beside a cache: the cache finds "
                                "each file's record offsets as it copies it, and reads no index; expected no "
                                "index_dir with a cache (or no cache, to read the files where they are)")
    if ctx.value("dataset", "args", "random_access", default="auto") != "auto":
        ctx.check(ACCESS_AT, f"found {ctx.value('dataset', 'args', 'random_access')} beside a cache: the cache's "
                             f"copies in {cache.dir} are read with positional reads of the local file system; "
                             "expected no random_access (or auto) with a cache")


def _check_index_dir(ctx: SectionContext, index_dir: str, needs: str) -> None:
    """Every data file has an entry in the index manifest of ``index_dir`` (the entries are checked against
    the indexes and data files when the pipeline is built)."""
    writes = (f"expected the indexes `batchloaders index {os.path.dirname(ctx.manifest.path) or '.'} --index-dir "
              f"{index_dir}` writes there, with {INDEX_MANIFEST_NAME}")
    try:
        listed = load_index_manifest(index_dir).files
    except ManifestError as error:
        found = (f"{index_dir}, which holds no {INDEX_MANIFEST_NAME}" if error.problems[0].message.startswith(
            "file not found") else f"{index_dir}, whose index manifest cannot be used: " + "; ".join(
            f"{p.path}: {p.message}" for p in error.problems))
        ctx.check(INDEX_DIR_AT, f"found global with index_dir {found}: {needs}; {writes}")
        return
    unindexed = [path for path in ctx.dataset.files if data_name(path, ctx.manifest.path) not in listed]
    if unindexed:
        ctx.check(INDEX_DIR_AT, f"found global, but the index manifest {index_manifest_path(index_dir)} records no "
                                f"index for {_some(unindexed)}: {needs}, which the index gives; {writes}")


def _some(paths: list[str]) -> str:
    shown = ", ".join(paths[:_SHOWN]) + (f" and {len(paths) - _SHOWN} more" if len(paths) > _SHOWN else "")
    return f"{len(paths)} data file(s) ({shown})"
