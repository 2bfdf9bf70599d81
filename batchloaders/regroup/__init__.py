"""Stages that regroup examples into batches other than one after another: bucketing, packing,
chunking and segmenting."""
from batchloaders.regroup import stages as _stages  # noqa: F401 (the built-in stages register)
