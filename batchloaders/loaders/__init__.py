"""Loaders: each turns a checked LoaderConfig into a dataset of blocks of examples. Importing this package
registers the built-in loader types (loaders/registry.py)."""
from batchloaders.loaders import continuous_sequence, discrete_sequence, independent, registry

registry.register("independent", independent)
registry.register("continuous_sequence", continuous_sequence)
registry.register("discrete_sequence", discrete_sequence)
