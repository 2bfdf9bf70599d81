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
from batchloaders.runtime import quiet as _quiet

_quiet.install_by_default()

__version__ = "0.1.0"


def build_input_fn(config, *, model=None):
    """Compile a loader config (path or dict) into an ``input_fn`` returning a tf.data.Dataset.

    See :func:`batchloaders.input_fn.build_input_fn`.
    """
    from batchloaders.input_fn import build_input_fn as _build  # deferred: imports TensorFlow, on first use

    return _build(config, model=model)


def numpy_iterator(config, *, model=None, process_index=None, process_count=None, device_put=None, prefetch=None):
    """The config's batches as NumPy arrays (or ``jax.device_put`` onto ``device_put``), ``prefetch`` made ahead in
    a thread (default: 1 with ``device_put``, else none beyond tf.data's own prefetch), with ``get_state()``/``set_state()``; each of ``process_count`` processes reads its share (default:
    JAX's processes). TensorFlow's GPUs are hidden first. See :mod:`batchloaders.runtime.numpy_iterator`."""
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
    if name in ("data_errors", "data_error_from"):  # they read TensorFlow's errors: runtime/translate.py
        from batchloaders.runtime import translate  # deferred: imports TensorFlow, on first use

        return getattr(translate, name)
    raise AttributeError(f"module 'batchloaders' has no attribute {name!r}")


__all__ = ["BatchLoaderError", "ConfigError", "DataError", "ManifestError", "PluginError", "PluginsNotChecked", "Problem",
           "ResumableIterator", "ResumeError", "ServiceError", "StateSaver",
           "build_input_fn", "data_error_from", "data_errors", "register_batcher", "register_secondary",
           "register_step", "load_config", "load_manifest", "numpy_iterator", "read_record", "restore_checkpoint",
           "__version__"]
