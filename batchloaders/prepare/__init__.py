"""Preparing datasets at any size, and its Python API (:mod:`batchloaders.prepare.api`): writing a manifest
(:mod:`~batchloaders.prepare.manifest`, its features inferred by :mod:`~batchloaders.prepare.infer` or read from
TFDS's description by :mod:`~batchloaders.prepare.tfds_info`), record indexes (:mod:`~batchloaders.prepare.index`),
the checks of ``verify`` (:mod:`~batchloaders.prepare.verify`), and rewriting a dataset into balanced shards
(:mod:`~batchloaders.prepare.reshard`); each data file's work on this machine or as one element of an Apache
Beam run (:mod:`~batchloaders.prepare.beam`). The commands (``batchloaders manifest``, ``index``, ``verify``,
``reshard``) parse their arguments and print what these return and raise.

Importing this package imports neither Beam nor TensorFlow: a runner is imported when a command names one.
"""
