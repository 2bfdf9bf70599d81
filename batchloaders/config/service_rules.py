"""The ``service`` block checked beyond its schema: the address, and the options that only work together.

Nothing here connects to the dispatcher: a config naming a fixed address validates anywhere (in CI, on a
laptop); input_fn checks the dispatcher answers when it builds the dataset (service.py).
"""
from __future__ import annotations

import re

from batchloaders.core.model import ServiceConfig
from batchloaders.config.kinds import DEFAULT
from batchloaders.config.stage_rules import given
from batchloaders.config.sections.loader import is_sequence

AT = ("args", "service")
_ADDRESS = re.compile(r"^(?:grpc://)?(?P<host>[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})$")


def address_problem(address: str) -> str | None:
    """Why ``address`` is no dispatcher address, or None; the schema's pattern says the same, this adds the
    port's range (and serves params["service_address"], which no schema sees)."""
    found = _ADDRESS.match(address) if isinstance(address, str) else None
    if found is None:
        return (f"found {address!r}: expected a dispatcher address HOST:PORT or grpc://HOST:PORT (what "
                "`batchloaders serve --dispatcher` prints), e.g. 'localhost:5050'")
    if not 1 <= int(found.group("port")) <= 65535:
        return f"found port {int(found.group('port'))} in {address!r}: expected a port from 1 to 65535"
    return None


def normalized(address: str) -> str:
    """'host:port' -> 'grpc://host:port' (TensorFlow's servers speak grpc only, and name their targets so)."""
    return address if address.startswith("grpc://") else f"grpc://{address}"


def _unfollowed(loader_type: str, args: dict) -> str | None:
    """What in a config TensorFlow's file sharding cannot trace back to the list of data files, or None.

    ``file`` sharding rewrites the pipeline on each worker to read only its share of the files: it walks
    from the reading back to the dataset of file names and shards that. It cannot get past the sequence
    loaders' window making, segmenting's lanes or bucketing's last-block flush (measured with TensorFlow
    2.21: the worker fails at its first batch with 'Did not find a shardable source'); the independent
    loader, alone or with packing, chunking or on_corrupt: skip_file, it follows.
    """
    if is_sequence(loader_type):
        return f"the {loader_type} loader"
    return next((stage.name for stage in given(args, "file_unshardable")), None)


def service_spec(block: dict, epochs, check, loader_type: str = DEFAULT, args: dict | None = None
                 ) -> ServiceConfig | None:
    """The checked block, or None after reporting through ``check(parts, message)``; ``args``: the loader's
    (what file sharding would have to see through)."""
    ok = True
    what = _unfollowed(loader_type, args or {}) if block.get("processing_mode") == "file" else None
    if what:
        check(AT + ("processing_mode",), (
            f"found processing_mode 'file' with {what}: TensorFlow's file sharding cannot trace such a pipeline "
            "back to its list of data files, and every worker would fail at its first batch ('Did not find a "
            "shardable source'); expected 'dynamic' (files handed out as the workers ask), 'data', or "
            "'file_or_data' (which falls back to data)"))
        ok = False
    why = address_problem(block["address"])
    if why:
        check(AT + ("address",), why)
        ok = False
    consumers, index = block.get("num_consumers"), block.get("consumer_index")
    if (consumers is None) != (index is None):
        given, missing = ("num_consumers", "consumer_index") if index is None else ("consumer_index", "num_consumers")
        check(AT + (given,), f"found {given} without {missing}: expected both (coordinated reads: each trainer "
                             "reads its turn, consumer_index, of num_consumers) or neither")
        ok = False
    elif consumers is not None:
        if index >= consumers:
            check(AT + ("consumer_index",), f"found consumer_index {index} with num_consumers {consumers}: expected "
                                            f"an index from 0 to {consumers - 1}")
            ok = False
        mode = block.get("processing_mode", "dynamic")
        if mode not in ("off", "dynamic"):
            check(AT + ("num_consumers",), f"found num_consumers with processing_mode {mode!r}: expected 'off' or "
                                           "'dynamic' (TensorFlow's coordinated reads support no other sharding)")
            ok = False
        if "job_name" not in block:
            check(AT + ("num_consumers",), "found num_consumers without job_name: expected a job_name (the "
                                           "trainers take turns reading one shared job, which a name identifies)")
            ok = False
        if epochs is not None:
            check(AT + ("num_consumers",), f"found num_consumers with epochs {epochs}: expected epochs null (in "
                                           "coordinated reads a trainer whose workers run out of data first "
                                           "would leave the others waiting for their turn forever)")
            ok = False
    if not ok:
        return None
    return ServiceConfig(normalized(block["address"]), block.get("processing_mode", "dynamic"), block.get("job_name"),
                         consumers, index, block.get("max_outstanding_requests"),
                         block.get("target_workers", "AUTO"), block.get("compression", "AUTO"),
                         **({"batch_timeout_seconds": block["batch_timeout_seconds"]}
                            if "batch_timeout_seconds" in block else {}))
