"""Preparing datasets at any size: the per-file work of ``manifest``, ``index`` and ``verify`` on an Apache Beam
runner (:mod:`batchloaders.prepare.beam`), and rewriting a dataset into balanced shards
(:mod:`batchloaders.prepare.reshard`).

Importing this package imports neither Beam nor TensorFlow: a runner is imported when a command names one.
"""
