"""Loaders: each turns a checked LoaderConfig into a dataset of blocks of examples. Importing this package
registers the built-in loaders (loaders/registry.py: the Loader contract)."""
from batchloaders.loaders import continuous_sequence, discrete_sequence, independent, registry

for _module in (independent, continuous_sequence, discrete_sequence):
    registry.register(_module.LOADER)
