"""Frozen, typed objects a validated manifest or loader config turns into.

The compiler only ever sees these: every default is filled in, every path is
resolved, every cross reference has been checked.
"""
from __future__ import annotations

import dataclasses
import os
import posixpath
import re
from typing import Any, Callable, ClassVar, Mapping, Protocol

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")

DESERIALIZE_TYPES = ("int", "float", "string", "raw")
COMPRESSIONS = (None, "zlib", "gzip")
# dtypes a manifest feature or a const may name.
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "bool", "string")


def url_scheme(path: str) -> str | None:
    """The URL scheme of a path ('gs' for 'gs://b/x', 'ram' for 'ram://x'), or None for a local path."""
    match = _SCHEME.match(path)
    return match.group(1) if match else None


def file_key(path: str) -> str:
    """How a manifest's ``files`` are keyed: a local path made absolute and normalized, a URL kept a URL with its
    path normalized (``gs://b/d/./x`` and ``gs://b/d/x`` are one file)."""
    scheme = url_scheme(path)
    if scheme is None:
        return os.path.normpath(os.path.abspath(path))
    rest = path[len(scheme) + 3:]
    return f"{scheme}://{posixpath.normpath(rest) if rest else ''}"


@dataclasses.dataclass(frozen=True)
class ManifestFeature:
    """One feature the data files store, and what it becomes once deserialized."""

    name: str
    dtype: str
    shape: tuple[int, ...]  # per sequence element when var_len
    var_len: bool
    deserialize_type: str
    endian: str | None = None  # raw only
    raw_len: int = 1  # raw only: number of byte strings per record (ignored when var_len)
    # var_len read from one feature's value list (manifest shape [null, ...], rows of ``shape``), not a feature list
    ragged: bool = False

    @property
    def record_shape(self) -> tuple[int, ...]:
        """Shape one record gives (per step for a feature list): raw len > 1 stacks on a new first axis."""
        return ((self.raw_len,) if self.raw_len > 1 else ()) + tuple(self.shape)

    @property
    def steps_per_record(self) -> int | None:
        """Length along the first axis of one record, or None for a feature list (it varies)."""
        if self.var_len:
            return None
        return self.record_shape[0] if self.record_shape else None


@dataclasses.dataclass(frozen=True)
class IndexFile:
    """The record index a ``files`` entry records (``index``): the sidecar's name, size and checksum."""

    name: str  # as written, relative to the manifest's directory
    size_bytes: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class DataFile:
    """What the manifest records of one data file (its ``files`` entry)."""

    name: str  # as written, relative to the manifest's directory
    num_records: int
    size_bytes: int | None = None
    sha256: str | None = None
    index: IndexFile | None = None
    # The entry's line in the manifest, for errors: worked out when one needs it (Document.lines).
    locate: Callable[[], int | None] | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def line(self) -> int | None:
        return self.locate() if self.locate is not None else None


@dataclasses.dataclass(frozen=True)
class Manifest:
    path: str
    compression: str | None
    allow_var_len: bool
    features: Mapping[str, ManifestFeature]
    # file_key(path) -> entry, for every file the manifest's ``files`` lists.
    files: Mapping[str, DataFile] = dataclasses.field(default_factory=dict)

    def entry(self, path: str) -> DataFile | None:
        """The ``files`` entry of data file ``path``, or None when the manifest does not list it."""
        return self.files.get(file_key(path)) if self.files else None

    @property
    def tf_compression(self) -> str:
        return {None: "", "zlib": "ZLIB", "gzip": "GZIP"}[self.compression]


@dataclasses.dataclass(frozen=True)
class Dataset:
    type: str  # "dir" or "list"
    manifest: Manifest
    files: tuple[str, ...]  # data files, sorted for dir, in list order for list
    json_path: str = "$.args.dataset"
    # list datasets only, so that checks made later (remote entries) can say where an entry came from:
    list_file: str | None = None  # the resolved list file
    entry_lines: tuple[int, ...] = ()  # line in list_file of each of files
    list_file_line: int | None = None  # line of args.dataset.args.list_file in the config, if known
    pattern: str | None = None  # dir datasets: the glob that chose the files
    access: "RandomAccess" = dataclasses.field(default_factory=lambda: RandomAccess())  # reads by offset


@dataclasses.dataclass(frozen=True)
class CacheSpec:
    """``args.dataset.args.cache``: a local directory holding copies of the data files for random access, and
    the most bytes its files may take (config/datasets.py resolves ``dir`` against the config's directory)."""

    dir: str
    max_bytes: int

    ENTRY_BYTES = 1024  # what a copy's entry file takes, at most, besides its data and index

    @staticmethod
    def copy_bytes(data_bytes: int, records: int) -> int:
        """What a copy of ``records`` records in ``data_bytes`` (uncompressed) takes in the cache, at most: the
        data, its record index (24 + 8 bytes per record) and its entry file.

        Args:
            data_bytes: the uncompressed data's size.
            records: its records.

        Returns:
            Bytes.
        """
        return data_bytes + 24 + 8 * records + CacheSpec.ENTRY_BYTES


@dataclasses.dataclass(frozen=True)
class RandomAccess:
    """How records are read at their offsets (a global shuffle, read_record, a restore by position): the
    dataset args ``index_dir`` (None: each index beside its data file), ``random_access`` (``auto``,
    ``local`` or ``filesystem``), ``reads_in_flight`` and ``cache`` (None: read the data files themselves)."""

    index_dir: str | None = None
    random_access: str = "auto"
    reads_in_flight: int = 16
    cache: CacheSpec | None = None


@dataclasses.dataclass(frozen=True)
class PrimaryFeature:
    from_name: str
    to_name: str
    json_path: str


@dataclasses.dataclass(frozen=True)
class SecondaryFeature:
    to_name: str
    type: str
    args: Mapping[str, Any]
    json_path: str
    info: "TensorInfo | None" = None  # what it constructs (filled in by the checker)


@dataclasses.dataclass(frozen=True)
class Step:
    tensor: str
    type: str
    args: Mapping[str, Any]
    json_path: str
    input_info: "TensorInfo | None" = None  # the tensor as this step receives it (filled in by the checker)
    output_info: "TensorInfo | None" = None  # and as it leaves it


@dataclasses.dataclass(frozen=True)
class PadSpec:
    tensor: str
    shape: tuple[int, ...] | None  # None: batch maximum along every axis; -1 in an axis: batch maximum
    value: Any  # None: 0 or ""
    json_path: str
    batching: str = "padded"  # padded, dense, ragged, sparse or a registered batcher's name
    batching_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class BucketSpec:
    """Length bucketing, resolved: bucket i holds lengths of ``by`` in [boundaries[i-1], boundaries[i])."""

    stage: ClassVar[str] = "bucketing"  # the regroup stage that makes its batches (regroup/stages/)

    by: str
    boundaries: tuple[int, ...]
    batch_sizes: tuple[int, ...]  # one more than boundaries (from max_tokens when that was given)
    max_tokens: int | None
    pad_to_boundary: tuple[str, ...]
    json_path: str
    # With max_tokens: whether only the data can tell the longest example (the running pipeline checks each).
    # Derived from the fields above and the manifest: not compared (resume.py), so saved fingerprints still match.
    check_longest: bool = dataclasses.field(default=False, compare=False)

    def origins(self) -> frozenset[str]:
        """What the loader must say of where each example was read (read/origins.py): its file and record
        numbers, when only the data can tell whether an example fits max_tokens."""
        return frozenset({"numbers"}) if self.check_longest else frozenset()

    def admits(self, bucket: int) -> int | None:
        """The longest length bucket ``bucket`` holds; None for the last, open one."""
        return self.boundaries[bucket] - 1 if bucket < len(self.boundaries) else None


@dataclasses.dataclass(frozen=True)
class PackGroup:
    """Tensors packed into rows of one ``length``, with one length per example, numbered by their own
    ``segment_ids`` and ``positions`` tensors."""

    tensors: tuple[str, ...]
    length: int
    segment_ids: str
    positions: str


# A field left out of a checkpoint's fingerprint while it holds its empty default (runtime/resume.py), so
# configs written before the field existed keep their fingerprints.
UNLESS_EMPTY = {"fingerprint": "unless empty"}


@dataclasses.dataclass(frozen=True)
class PackSpec:
    """Packing, resolved (regroup/packing.py). The first group's row is ``length`` steps with ``segment_ids``
    and ``positions``; ``tensors`` are every packed tensor. ``groups`` is empty when one group packs them all,
    else it lists every group (``inputs`` and ``targets`` of an encoder-decoder): an example then goes into a
    row only where each group's tensors fit."""

    stage: ClassVar[str] = "packing"

    length: int
    tensors: tuple[str, ...]
    segment_ids: str
    positions: str
    allow_split: bool
    json_path: str
    groups: tuple[PackGroup, ...] = dataclasses.field(default=(), metadata=UNLESS_EMPTY)

    @property
    def packed_groups(self) -> tuple[PackGroup, ...]:
        """Every group, the one-group form included."""
        return self.groups or (PackGroup(self.tensors, self.length, self.segment_ids, self.positions),)

    def group_of(self, name: str) -> PackGroup:
        """The group that packs tensor ``name``."""
        return next(g for g in self.packed_groups if name in g.tensors)

    def origins(self) -> frozenset[str]:
        return frozenset()


@dataclasses.dataclass(frozen=True)
class ChunkTensor:
    """How one tensor is chunked: cores of ``size`` steps starting every ``step``, ``left`` and ``right``
    steps of context around each (zeros beyond the sequence's borders)."""

    name: str
    size: int
    step: int
    left: int
    right: int

    @property
    def width(self) -> int:
        """The longest chunk: context and a full core."""
        return self.left + self.size + self.right


@dataclasses.dataclass(frozen=True)
class ChunkSpec:
    """Chunking, resolved (see chunking.py): ``tensors`` are cut into chunks, ``copied`` go whole to
    every chunk of their example; ``reference`` (a tensor at the block's own size and step) fixes the
    number of chunks and decides the last piece's fate with ``min_size``."""

    stage: ClassVar[str] = "chunking"

    size: int
    step: int
    left: int
    right: int
    min_size: int
    shuffle_buffer: int | None
    tensors: tuple[ChunkTensor, ...]
    copied: tuple[str, ...]
    reference: str
    json_path: str
    source_key: bool = False  # whether a source_key feature needs the loader's file and record of each example

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tensors)

    def origins(self) -> frozenset[str]:
        """'<file>:<record>' of each example, when a source_key feature asks for it."""
        return frozenset({"source_key"}) if self.source_key else frozenset()


COUNTERS = ("key", "sequence", "sequence_count", "length", "total_length", "is_first", "is_last", "slot")
COUNTER_DTYPES = {"key": "string", "is_first": "bool", "is_last": "bool"}  # the others: int32


@dataclasses.dataclass(frozen=True)
class SegmentSpec:
    """Segmenting, resolved (see segmenting.py): ``tensors`` are cut into segments of ``num_unroll`` steps,
    ``context`` tensors are copied to every segment, ``key`` is the tensor naming each sequence (None: the
    loader's '<file>:<record>'), ``names`` maps each counter (COUNTERS) to its tensor name (prefix added)."""

    stage: ClassVar[str] = "segmenting"

    num_unroll: int
    lanes: int | None  # None: target_batch_size (or the batch size input_fn is given)
    pad: bool
    allow_small_batch: bool
    tensors: tuple[str, ...]
    context: tuple[str, ...]
    key: str | None
    names: Mapping[str, str]
    json_path: str
    key_from_manifest: str | None = None  # a manifest feature read only for the key, under the to_name ``key``

    def origins(self) -> frozenset[str]:
        """Where each sequence was read names it, when no ``key`` tensor does."""
        return frozenset({"sequence_key"}) if self.key is None else frozenset()


@dataclasses.dataclass(frozen=True)
class Source:
    """One dataset of a mixture (``args.sources``): its dataset, its primary features (the same tensors as every
    other source's), and its weight (given, or its record count)."""

    name: str
    index: int
    dataset: Dataset
    primary_features: tuple[PrimaryFeature, ...]
    weight: float
    json_path: str


@dataclasses.dataclass(frozen=True)
class Mixing:
    """``args.mixing``: what happens when a source runs out, and whether a batch mixes sources."""

    exhausted: str = "continue"  # or "stop", "repeat"
    batches: str = "mixed"  # or "per_source", "stratified" (loaders/stratified.py)


@dataclasses.dataclass(frozen=True)
class ServiceConfig:
    """The ``service`` block, checked (config/service_rules.py): the compiled pipeline runs on the
    tf.data service's workers (service.py). ``address`` is ``grpc://host:port``; ``processing_mode`` one of
    SERVICE_MODES; None fields are left to TensorFlow."""

    address: str
    processing_mode: str = "dynamic"
    job_name: str | None = None
    num_consumers: int | None = None
    consumer_index: int | None = None
    max_outstanding_requests: int | None = None
    target_workers: str = "AUTO"
    compression: str = "AUTO"
    # How long next() waits for a batch (None: for ever; the default leaves time for a first batch's shuffle
    # buffer to fill). It does not change the batches: not compared (resume.py).
    batch_timeout_seconds: float | None = dataclasses.field(default=300.0, compare=False)
    json_path: str = "$.args.service"


class RegroupSpec(Protocol):
    """What every regroup stage's checked block is (BucketSpec, PackSpec ... or a plugin stage's own frozen
    dataclass): ``stage`` names the registered stage that makes its batches (regroup/stage.py)."""

    stage: ClassVar[str]
    json_path: str

    def origins(self) -> frozenset[str]:
        """What the loader must say of where each example was read (read/origins.py)."""


def _regroup_property(spec: type) -> property:
    """A LoaderConfig property: its regroup spec when it is a ``spec`` (that stage makes the batches), else None."""
    return property(lambda self: self.regroup_of(spec.stage),
                    doc=f"The {spec.stage} spec, None unless {spec.stage} is the stage.")


SERVICE_MODES = ("off", "dynamic", "file", "data", "file_or_data")


def format_shape(shape) -> str:
    """(None, 2) -> '[?, 2]': ? marks an axis whose length varies between examples."""
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """Static description of one tensor of one example (no batch axis).

    ``shape`` entries are ints or None for an axis whose length varies between
    examples (a var_len axis or a window axis of random length).
    """

    dtype: str
    shape: tuple[int | None, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)


def _group(of: type, **kw) -> Any:
    """A LoaderConfig field holding one group of settings (``of``). A checkpoint's fingerprint
    (runtime/resume.py) names each setting of a group by its config key, as it names every other setting."""
    return dataclasses.field(metadata={"group": of}, **kw)


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How the data files are read, parsed and handed on (config/sections/reading.py builds it from ``args``).
    None for the parallelism and the prefetch: tf.data tunes it (AUTOTUNE). They change how fast the batches
    come, not which batches, except ``num_parallel_reads`` without shuffling (the number of files whose records
    alternate), ``sloppy_interleave`` (records may arrive out of order) and ``on_corrupt`` (``skip_file``: a
    damaged file's remaining records are left out)."""

    num_read_buffer_bytes: int  # per open file; 0: unbuffered
    num_prefetch: int | None  # batches; 0: none
    num_parallel_reads: int | None = None
    num_parallel_parses: int | None = None
    sloppy_interleave: bool = False
    num_interleave_out_buffer_elements: int = 1  # per open file
    num_interleave_in_buffer_elements: int = 1  # file names fetched ahead
    on_corrupt: str = "fail"  # or "skip_file"


@dataclasses.dataclass(frozen=True)
class ShuffleOptions:
    """What is shuffled and in buffers of what size (config/sections/shuffling.py builds it from ``args``).

    ``num_mix_files`` is here, not in ReadOptions: it is the number of files open at once so that their
    records mix, and applies only when ``shuffle`` is true. ``scope`` is the config's ``shuffle_scope``:
    ``buffer``, or ``global`` for one permutation of all records per epoch (read/global_order.py).
    The seed is not here but on LoaderConfig: it draws the window lengths, the chunk shuffles and a
    mixture's sources too, with or without ``shuffle``.
    """

    shuffle: bool = False
    # The buffers: the schema requires them with shuffle true and scope buffer (a global shuffle has none).
    num_shuffle_buffer_elements: int | None = None
    num_filenames_shuffle_buffer: int | None = None
    num_mix_files: int | None = None
    scope: str = dataclasses.field(default="buffer", metadata={"key": "shuffle_scope"})  # (its config key)
    # shuffle_scope global: files per window of the epoch's permuted files (None: all files, one window).
    window_files: int | None = dataclasses.field(default=None, metadata={"key": "shuffle_window_files"})


@dataclasses.dataclass(frozen=True)
class WindowSpec:
    """The windows of a loader whose kind has them (``LoaderKind.sequence``; config/sections/loader.py builds
    it): lengths drawn from ``min_window..max_window`` (records or steps, as the kind says), starting ``stride``
    steps apart, or None for windows that follow each other. ``stride`` is None unless the kind concatenates
    records (``LoaderKind.concatenates_records``)."""

    min_window: int
    max_window: int
    stride: int | None = None

    @property
    def fixed(self) -> bool:
        """Every window has the same length (min_window == max_window)."""
        return self.min_window == self.max_window


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    """A checked loader config, every default filled in (config/config.py). The settings that belong together
    are grouped, each group built by its config section: ``reading`` (ReadOptions),
    ``shuffling`` (ShuffleOptions) and the loader's ``window`` (WindowSpec; None for a loader without
    windows). The config's keys are the same, flat in ``args``."""

    source: str
    type: str
    name: str | None
    inputs: tuple[str, ...]
    targets: tuple[str, ...]
    dataset: Dataset
    target_batch_size: int
    drop_remainder: bool
    epochs: int | None
    reading: ReadOptions = _group(ReadOptions)
    shuffling: ShuffleOptions = _group(ShuffleOptions)
    primary_features: tuple[PrimaryFeature, ...]
    secondary_features: tuple[SecondaryFeature, ...]
    processing_steps: tuple[Step, ...]
    padding: bool  # True once any padding is asked for
    pad_specs: Mapping[str, PadSpec]
    # The loader's windows when its kind has them (LoaderKind.sequence), else None.
    window: WindowSpec | None = _group(WindowSpec, default=None)
    multi_load: bool = False  # the independent loader's; changes nothing (docs/loader-config.md)
    seed: int | None = None  # every random draw: shuffles, window lengths, chunk shuffles, a mixture's sources
    resume: str = "state"  # or "replay": what batchloaders.ResumableIterator checkpoints
    # A mixture (loaders/mixture.py): every source; ``dataset`` and ``primary_features`` are then the first one's.
    sources: tuple[Source, ...] = ()
    mixing: Mixing | None = None
    # Per-example static info of every tensor after primaries, secondaries and steps.
    tensors: Mapping[str, TensorInfo] = dataclasses.field(default_factory=dict)
    # How examples are grouped into batches other than one after another (at most one; None: plain batching).
    regroup: "RegroupSpec | None" = None
    service: ServiceConfig | None = None  # None: the pipeline runs in this process
    model_assumed: bool = False  # no model block: every feature is taken as a model input, none as a target

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.inputs + self.targets

    def regroup_of(self, stage: str) -> "RegroupSpec | None":
        """The config's regroup spec when stage ``stage`` makes its batches, else None.

        Args:
            stage: a registered regroup stage's name (its block's key in ``args``).

        Returns:
            ``regroup``, or None when the config has no regroup block or another stage's.
        """
        return self.regroup if self.regroup is not None and self.regroup.stage == stage else None

    # The built-in stages' specs by name, for their own code in regroup/ (tools/structure.py: no other code
    # names a stage; a new stage asks regroup_of or regroup).
    bucketing = _regroup_property(BucketSpec)
    packing = _regroup_property(PackSpec)
    chunking = _regroup_property(ChunkSpec)
    segmenting = _regroup_property(SegmentSpec)

    def of_source(self, source: Source) -> "LoaderConfig":
        """This config reading ``source`` alone (its dataset and primary features; the rest as it is)."""
        return dataclasses.replace(self, dataset=source.dataset, primary_features=source.primary_features,
                                   sources=(), mixing=None)

    @property
    def selected(self) -> dict:
        """to_name -> ManifestFeature of every primary feature."""
        features = self.dataset.manifest.features
        return {p.to_name: features[p.from_name] for p in self.primary_features}
