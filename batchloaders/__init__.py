"""batchloaders: validated dataset manifests and loader configs compiled into tf.data pipelines.

Importing the package does not import TensorFlow; ``build_input_fn`` does, on first use. Whatever
imports TensorFlow first after this package (``build_input_fn``, Keras, the program) does it without
TensorFlow's native log lines, unless ``TF_CPP_MIN_LOG_LEVEL`` is set (batchloaders/runtime/quiet.py).
"""
from batchloaders.errors import (BatchLoaderError, ConfigError, DataError, ManifestError, PluginsNotChecked, Problem,
                                 ResumeError, ServiceError, data_error_from, data_errors)
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
        from batchloaders.loaders.record_access import read_record  # deferred: imports TensorFlow, on first use

        return read_record
    raise AttributeError(f"module 'batchloaders' has no attribute {name!r}")


__all__ = ["BatchLoaderError", "ConfigError", "DataError", "ManifestError", "PluginError", "PluginsNotChecked", "Problem",
           "ResumableIterator", "ResumeError", "ServiceError", "StateSaver",
           "build_input_fn", "data_error_from", "data_errors", "register_batcher", "register_secondary",
           "register_step", "load_config", "load_manifest", "read_record", "restore_checkpoint", "__version__"]
