"""The Python API of dataset preparation: ``batchloaders.write_manifest``, ``write_index`` and ``reshard``.

Each does what its command does (``batchloaders manifest``, ``index``, ``reshard``), on this machine or,
given a ``runner``, with one Apache Beam element per data file (per output shard for ``reshard``); what
the commands print as problems these raise as located errors. The work is done by
:mod:`batchloaders.prepare.manifest`, :mod:`batchloaders.prepare.index` and :mod:`batchloaders.prepare.reshard`;
the commands call those too.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from batchloaders.prepare import reshard as _reshard
from batchloaders.prepare.beam import runner_from

BeamOptions = Mapping[str, object] | Sequence[str] | None


def write_manifest(data_dir: str, *, pattern: str | None = None, runner: str | None = None,
                   beam_options: BeamOptions = None) -> str:
    """Write or update ``data_dir/__manifest__.json`` as ``batchloaders manifest`` does.

    Example:
        >>> batchloaders.write_manifest("data/chars", runner="DirectRunner",
        ...                             beam_options={"direct_num_workers": 2})

    Args:
        data_dir: the dataset directory: a local path, or a URL of any file system TensorFlow reads (``gs://``).
        pattern: the data files to list, a glob relative to ``data_dir``. None: those a ``dir`` dataset finds.
        runner: a Apache Beam runner (``DirectRunner``, ``DataflowRunner``, ...) that reads the files, one
            element per file. None: this process reads them.
        beam_options: Beam pipeline options (a mapping, or ``KEY=VALUE`` strings), with ``runner`` only.

    Returns:
        The manifest's path.

    Raises:
        DataError: a data file is damaged or cannot be read (nothing is written).
        ManifestError: no data file, an existing manifest that is invalid, or a manifest that would be.
        ConfigError: a wrong ``pattern`` (its problem's file ``<arguments>``, its path ``pattern``), or Beam
            options without a runner.
        BeamNotInstalled: a runner is given and Apache Beam is not installed.
        BeamFailed: the Beam run failed.
    """
    from batchloaders.prepare import manifest  # deferred: imports TensorFlow

    return manifest.write_manifest(data_dir, pattern=pattern, runner=runner_from(runner, beam_options)).path


def write_index(data_dir_or_config: str, *, index_dir: str | None = None, runner: str | None = None,
                beam_options: BeamOptions = None) -> list[str]:
    """Write the record index of every data file and record it, as ``batchloaders index`` does.

    By default each index is written beside its data file and recorded in the dataset's manifest. With
    ``index_dir`` (for data in a place that cannot be written, such as a read-only bucket) the indexes and
    ``__index_manifest__.json``, which records each with its data file's size and SHA-256, are written there
    and nothing in the dataset's directory; a config then reads them with ``args.dataset.args.index_dir``.

    Example:
        >>> batchloaders.write_index("gs://bucket/data", index_dir="gs://my-bucket/indexes")

    Args:
        data_dir_or_config: a dataset directory, local or a URL such as ``gs://...`` (its manifest written first
            when there is none, unless ``index_dir``), or a config (whose own ``index_dir``, if it names one, is
            used when ``index_dir`` is None).
        index_dir: where to write the indexes and their index manifest, a local directory or a URL, created if
            missing. None: beside each data file.
        runner: a Apache Beam runner that walks the files, one element per file. None: this process does.
        beam_options: Beam pipeline options (a mapping, or ``KEY=VALUE`` strings), with ``runner`` only.

    Returns:
        The index files written, then the manifest (with ``index_dir``: the index manifest).

    Raises:
        DataError: a data file is damaged, or disagrees with its manifest entry (nothing is written).
        ManifestError: compressed files, files outside the manifest's directory, a manifest that is invalid, or
            with ``index_dir`` a dataset directory without a manifest.
        ConfigError: an invalid config, or Beam options without a runner.
        IndexDirError: ``index_dir`` cannot be written.
        BeamNotInstalled: a runner is given and Apache Beam is not installed.
        BeamFailed: the Beam run failed.
    """
    from batchloaders.prepare import index  # deferred: imports TensorFlow

    return index.write_index(data_dir_or_config, runner_from(runner, beam_options), index_dir=index_dir).paths()


def reshard(source: str, destination: str, shards: int, *, compression: str | None = "none", index: bool = True,
            overwrite: bool = False, leave_out_unlisted: bool = False, runner: str | None = None,
            beam_options: BeamOptions = None) -> list[str]:
    """Rewrite a dataset into ``shards`` files balanced by record count, ready for ``shuffle_scope: global``.

    Which record goes to which shard depends on its position alone (see :mod:`batchloaders.prepare.reshard`),
    so every run, on any runner, writes the same bytes. Nothing looks complete in ``destination`` before the
    manifest, written last.

    Example:
        >>> batchloaders.reshard("data/raw", "data/global", 64)
        >>> batchloaders.reshard("data/raw", "data/global", 64, overwrite=True, runner="DirectRunner",
        ...                      beam_options={"direct_num_workers": 2})

    Args:
        source: a dataset directory whose manifest lists its files, or a loader config.
        destination: the output directory: new or empty, unless ``overwrite``.
        shards: the number of output files.
        compression: the output's, ``"none"`` (or None) or ``"gzip"``; only uncompressed files are indexed.
        index: write each output file's record index (uncompressed output only).
        overwrite: replace what ``destination`` holds, once every new shard is written.
        leave_out_unlisted: when SRC holds data files its manifest does not list, reshard the listed ones (a
            warning names the others); by default such files are a ManifestError, since their records would be
            lost.
        runner: a Apache Beam runner that writes the shards, one element per shard. None: this process does.
        beam_options: Beam pipeline options (a mapping, or ``KEY=VALUE`` strings), with ``runner`` only.

    Returns:
        The paths written: the shards, their indexes, then the manifest.

    Raises:
        DataError: a source file is missing, damaged, cannot be read or disagrees with its manifest entry.
        ManifestError: SRC's manifest is invalid or lists no files, or SRC holds data files it does not list
            (unless ``leave_out_unlisted``).
        ConfigError: a wrong ``shards`` or compression, a SRC that is not there, a DEST refused, or Beam options
            that are wrong or without a runner.
        DestinationError: ``destination`` cannot be written.
        BeamNotInstalled: a runner is given and Apache Beam is not installed.
        BeamFailed: the Beam run failed.
    """
    chosen = _reshard.Options(shards, None if compression == "none" else compression, index, overwrite,
                              leave_out_unlisted)
    return _reshard.reshard(source, destination, chosen, runner_from(runner, beam_options))

