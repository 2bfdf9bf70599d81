"""batchloaders: validated dataset manifests and loader configs compiled into tf.data pipelines.

Importing the package does not import TensorFlow; ``build_input_fn`` does, on first use. Whatever
imports TensorFlow first after this package (``build_input_fn``, Keras, the program) does it without
TensorFlow's native log lines, unless ``TF_CPP_MIN_LOG_LEVEL`` is set (batchloaders/runtime/quiet.py).
"""
from batchloaders.errors import (BatchLoaderError, ConfigError, DataError, ManifestError, PluginsNotChecked, Problem,
                                 ResumeError, ServiceError)
from batchloaders.transform.extend import PluginError, register_batcher, register_secondary, register_step
from batchloaders.config.config import load_config
from batchloaders.config.manifest import load_manifest
from batchloaders import regroup as _regroup  # noqa: F401 (the built-in regroup stages register, without TensorFlow)
from batchloaders.runtime import quiet as _quiet

_quiet.install_by_default()

__version__ = "0.1.0"


def build_input_fn(config, *, model=None):
    """Compile a loader config into an ``input_fn`` returning a tf.data.Dataset, checking the config first.

    Example:
        >>> input_fn = batchloaders.build_input_fn("configs/chars_independent.yaml", model=model)
        >>> model.fit(input_fn(), epochs=3, steps_per_epoch=100)  # this config repeats (epochs: null)

    Args:
        config: a path to a .yaml/.yml/.json config, a dict, or a config :func:`load_config` gave.
        model: a Keras model whose input and output names replace the config's ``model`` block; batches are then
            packed the way it takes them (dicts, tuples or a single tensor), and its own ``fit``, ``evaluate`` and
            ``predict`` raise data errors as located DataErrors. None: the config's ``model`` block, dicts.

    Returns:
        The ``InputFn`` of the checked config. ``input_fn(input_context=None, *, params=None, mode=None,
        config=None, skip_batches=0)`` gives the dataset of (features, targets) batches.

    Raises:
        ConfigError: every problem of the config, or of the model against it, found at once.
        ManifestError: every problem of the dataset's manifest.
    """
    from batchloaders.input_fn import build_input_fn as _build  # deferred: imports TensorFlow, on first use

    return _build(config, model=model)


def numpy_iterator(config, *, model=None, process_index=None, process_count=None, device_put=None, prefetch=None):
    """The config's batches as NumPy arrays (or JAX arrays), for JAX or PyTorch training loops.

    TensorFlow's GPUs are hidden first (the pipeline runs on the CPU whatever trains). See
    :mod:`batchloaders.runtime.numpy_iterator`.

    Example:
        >>> batches = batchloaders.numpy_iterator("configs/chars_independent.yaml")
        >>> features, targets = next(batches)
        >>> state = batches.get_state()  # a small JSON-serializable dict

    Args:
        config: a path to a .yaml/.yml/.json config, a dict, or a config :func:`load_config` gave.
        model: a Keras model, as for :func:`build_input_fn`.
        process_index: this process's number, from 0; given with ``process_count``. Default: JAX's (0 with one
            process).
        process_count: the processes reading the data, each its share. Default: JAX's process count, else 1.
        device_put: a JAX sharding or device: each batch is ``jax.device_put`` onto it. None: NumPy arrays.
        prefetch: the batches made ahead in a thread. Default: 1 with ``device_put``, else 0 (tf.data's own
            prefetch only).

    Returns:
        The ``NumpyIterator`` of the batches, with ``get_state()`` and ``set_state()``.

    Raises:
        ConfigError: a problem of the config; a tensor that comes out ragged or sparse; ``process_index``,
            ``process_count``, ``device_put`` or ``prefetch`` not usable.
        ManifestError: a problem of the dataset's manifest.
    """
    from batchloaders.runtime import numpy_iterator as _numpy  # deferred: imports TensorFlow, on first use

    _numpy.hide_gpus()  # before anything starts TensorFlow's runtime: its devices are fixed then
    input_fn = build_input_fn(config, model=model)
    return _numpy.NumpyIterator(input_fn, process_index=process_index, process_count=process_count,
                                device_put=device_put, prefetch=prefetch)


def __getattr__(name):
    # StateSaver is a tf.Module: importing it imports TensorFlow, so it loads on first use.
    if name == "StateSaver":
        from batchloaders.runtime.state import StateSaver  # deferred: imports TensorFlow, on first use

        return StateSaver
    if name == "ResumableIterator":  # a tf.Module too
        from batchloaders.runtime.resume import ResumableIterator  # deferred: imports TensorFlow, on first use

        return ResumableIterator
    if name == "restore_checkpoint":  # tf.train.Checkpoint.restore, a damaged checkpoint a ResumeError
        from batchloaders.runtime.resume import restore_checkpoint  # deferred: imports TensorFlow, on first use

        return restore_checkpoint
    if name == "read_record":  # decodes with TensorFlow
        from batchloaders.runtime.record_access import read_record  # deferred: imports TensorFlow, on first use

        return read_record
    if name == "data_errors":  # reads TensorFlow's errors (runtime/translate.py)
        from batchloaders.runtime.translate import data_errors  # deferred: imports TensorFlow, on first use

        return data_errors
    if name == "data_error_from":
        from batchloaders.runtime.translate import data_error_from  # deferred: imports TensorFlow, on first use

        return data_error_from
    if name == "write_manifest":  # reads data files with TensorFlow (or on an Apache Beam runner)
        from batchloaders.prepare.api import write_manifest  # deferred: imports TensorFlow, on first use

        return write_manifest
    if name == "write_index":
        from batchloaders.prepare.api import write_index  # deferred: imports TensorFlow, on first use

        return write_index
    if name == "reshard":
        from batchloaders.prepare.api import reshard  # deferred: imports TensorFlow, on first use

        return reshard
    raise AttributeError(f"module 'batchloaders' has no attribute {name!r}")


__all__ = ["BatchLoaderError", "ConfigError", "DataError", "ManifestError", "PluginError", "PluginsNotChecked", "Problem",
           "ResumableIterator", "ResumeError", "ServiceError", "StateSaver",
           "build_input_fn", "data_error_from", "data_errors", "register_batcher", "register_secondary",
           "register_step", "load_config", "load_manifest", "numpy_iterator", "read_record", "reshard",
           "restore_checkpoint", "write_index", "write_manifest", "__version__"]
