"""Stages that regroup examples into batches other than one after another: bucketing, packing,
chunking and segmenting."""
