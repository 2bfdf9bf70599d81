"""The compiled pipeline run by the tf.data service: ``tf.data.experimental.service.distribute`` with the
``service`` block's options, and the servers ``batchloaders serve`` starts.

What is registered with the dispatcher is the whole compiled dataset (reading, parsing, steps, padding,
batching, prefetch): the workers make finished batches and the trainer receives them. Every worker therefore
batches the examples it reads on its own, so under ``dynamic``, ``file`` and ``data`` each worker's last
batch of an epoch may be a small one. Anything that counts inside the pipeline (chunking's and
segmenting's reports, ``on_corrupt: skip_file``'s) counts on the workers, in their copy of its tables:
input_fn's reports say None under the service rather than a count of zero.

>>> ds = build_input_fn("configs/chars_service.yaml")(params={"service_address": "dispatcher:5050"})
"""
from __future__ import annotations

import dataclasses
import socket
import threading
from typing import Any, Callable, Mapping

import tensorflow as tf
from tensorflow.python.data.util import structure
from tensorflow.python.eager import cancellation, context, execute

from batchloaders.core.model import LoaderConfig, ServiceConfig
from batchloaders.config.service_rules import address_problem, normalized
from batchloaders.errors import ConfigError, Problem, ServiceError

CONNECT_SECONDS = 10.0  # TensorFlow itself retries registering a dataset forever, silently: see reachable()
_POLICY = {"off": "OFF", "dynamic": "DYNAMIC", "file": "FILE", "data": "DATA", "file_or_data": "FILE_OR_DATA"}


def address(service: ServiceConfig, params: Mapping[str, Any] | None) -> str:
    """The dispatcher's grpc:// address: ``params["service_address"]`` when given (known only once the job
    starts), else the config's."""
    override = (params or {}).get("service_address")
    if override is None:
        return service.address
    why = address_problem(override)
    if why:
        raise ConfigError(Problem("<params>", "$.service_address", why))
    return normalized(override)


def unreachable(target: str, seconds: float = CONNECT_SECONDS) -> str | None:
    """Why nothing accepts a connection at ``target`` (grpc://HOST:PORT or HOST:PORT) within ``seconds``,
    or None when something does.

    ``distribute`` registers the dataset with the dispatcher when the dataset is made and, when nothing
    answers, retries for ever with only INFO log lines to show for it (a worker likewise waits for its
    dispatcher); one TCP connect first turns that hang into an error naming the address.
    """
    host, _, port = target.removeprefix("grpc://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=seconds):
            return None
    except OSError as error:
        return (f"no tf.data service dispatcher answers at {target} ({error.strerror or error}, waited at most "
                f"{seconds:g} s)")


def reachable(target: str, where: Problem) -> None:
    """Raise ServiceError, at ``where``'s file and path, unless the dispatcher at ``target`` answers."""
    why = unreachable(target)
    if why:
        raise ServiceError(dataclasses.replace(where, message=(
            f"{why}: expected a running dispatcher (`batchloaders serve --dispatcher` prints its address; "
            "params[\"service_address\"] replaces the config's)")))


def distribute(dataset: tf.data.Dataset, config: LoaderConfig, params: Mapping[str, Any] | None = None
               ) -> tf.data.Dataset:
    """``dataset`` (the whole compiled pipeline) registered with the config's tf.data service; the dataset
    returned reads its batches from the service's workers."""
    service = config.service
    target = address(service, params)
    overridden = (params or {}).get("service_address") is not None
    reachable(target, Problem("<params>", "$.service_address", "") if overridden else
              Problem(config.source, f"{service.json_path}.address", ""))
    policy = getattr(tf.data.experimental.service.ShardingPolicy, _POLICY[service.processing_mode])
    distributed = dataset.apply(tf.data.experimental.service.distribute(
        processing_mode=policy, service=target, job_name=service.job_name,
        consumer_index=service.consumer_index, num_consumers=service.num_consumers,
        max_outstanding_requests=service.max_outstanding_requests,
        compression=None if service.compression == "NONE" else service.compression,
        target_workers=service.target_workers))
    if config.epochs is None:  # what the local pipeline tells Keras too: the batches never end
        distributed = distributed.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    return distributed


class BoundedWait:
    """Fetches the next batch of one eager iterator of a distributed dataset, waiting at most ``seconds``.

    TensorFlow never ends an epoch while a task of it sits on a worker that stopped: it waits for the worker to
    come back at its address (the dispatcher's worker_timeout_ms only feeds its metrics), and its client has no
    deadline. TensorFlow's own cancellation ends that wait: the iterator is cancelled and stays failed.
    """

    def __init__(self, seconds: float, target: str, where: Problem):
        self.seconds, self.target, self.where = seconds, target, where
        self.failed: ServiceError | None = None

    def __call__(self, iterator) -> Any:
        if self.failed is not None:  # a cancelled iterator would only say "cancelled" from now on
            raise self.failed
        manager = cancellation.CancellationManager()
        timer = threading.Timer(self.seconds, manager.start_cancel)
        timer.daemon = True
        timer.start()
        try:
            with context.execution_mode(context.SYNC):
                flat = execute.execute_with_cancellation(
                    "IteratorGetNext", len(iterator._flat_output_types), [iterator._iterator_resource],  # noqa: SLF001
                    ("output_types", iterator._flat_output_types, "output_shapes", iterator._flat_output_shapes),
                    context.context(), manager)
        except tf.errors.CancelledError as error:
            if not manager.is_cancelled:
                raise
            self.failed = ServiceError(dataclasses.replace(self.where, message=self._message()))
            raise self.failed from error
        finally:
            timer.cancel()
        return structure.from_compatible_tensor_list(iterator.element_spec, flat)

    def _message(self) -> str:
        return (f"no batch from the tf.data service at {self.target} within {self.seconds:g} s: a worker stopped "
                "with its part of the data unfinished (TensorFlow waits for it to come back at its address and "
                "never ends the epoch without it), or the dispatcher stopped; expected every worker to run until "
                "the end of the data (a worker restarted with the same --port carries on), or a longer "
                "batch_timeout_seconds for batches that take longer to make")


def bounded_wait(config: LoaderConfig, params: Mapping[str, Any] | None) -> Callable[[], BoundedWait] | None:
    """What makes each eager iterator's BoundedWait for ``config``'s service block; None when it waits for ever."""
    seconds = config.service.batch_timeout_seconds
    if seconds is None:
        return None
    where = Problem(config.source, f"{config.service.json_path}.batch_timeout_seconds", "")
    target = address(config.service, params)
    return lambda: BoundedWait(seconds, target, where)


def start_dispatcher(port: int = 0, work_dir: str | None = None, worker_addresses=None):
    """Start a tf.data service dispatcher.

    Args:
        port: the port it listens on; 0: one the system chooses (see :func:`bound_address`).
        work_dir: where it keeps its journal, so that a restarted dispatcher recovers its jobs (fault-tolerant
            mode). None: no journal.
        worker_addresses: the fixed list of workers that the ``file``, ``data`` and ``file_or_data`` modes need.

    Returns:
        The started ``tf.data.experimental.service.DispatchServer``.
    """
    service = tf.data.experimental.service
    return service.DispatchServer(service.DispatcherConfig(
        port=port, work_dir=work_dir, fault_tolerant_mode=work_dir is not None,
        worker_addresses=list(worker_addresses) if worker_addresses else None))


def start_worker(dispatcher: str, port: int = 0, worker_address: str | None = None, *,
                 heartbeat_ms: int | None = None):
    """Start a tf.data service worker registered with ``dispatcher``.

    Args:
        dispatcher: the dispatcher's address, HOST:PORT or grpc://HOST:PORT.
        port: the port it listens on; 0: one the system chooses (see :func:`bound_address`).
        worker_address: how the dispatcher and trainers reach it. Default: localhost:PORT.
        heartbeat_ms: how often it reports to the dispatcher. Default: TensorFlow's, 30 s. Deleting a stopped
            worker waits for its heartbeat thread to wake, up to that long.

    Returns:
        The started ``tf.data.experimental.service.WorkerServer``.
    """
    service = tf.data.experimental.service
    extra = {} if heartbeat_ms is None else {"heartbeat_interval_ms": heartbeat_ms}
    return service.WorkerServer(service.WorkerConfig(
        dispatcher_address=normalized(dispatcher).removeprefix("grpc://"), port=port,
        worker_address=worker_address, **extra))


def bound_address(server) -> str:
    """The address a started server listens on.

    Args:
        server: a server :func:`start_dispatcher` or :func:`start_worker` started.

    Returns:
        HOST:PORT, with the port the system chose for port 0.
    """
    if hasattr(server, "target"):  # DispatchServer
        return server.target.removeprefix("grpc://")
    return server._address  # WorkerServer has no public accessor for it in TensorFlow 2.21
