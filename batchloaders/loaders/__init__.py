"""Loaders: each turns a checked LoaderConfig into a dataset of blocks of examples. Importing this package
registers the built-in loaders (loaders/registry.py: the Loader contract) and the mixing modes of their own
module (mixture.MODES)."""
from batchloaders.loaders import continuous_sequence, discrete_sequence, independent, mixture, registry, stratified

for _module in (independent, continuous_sequence, discrete_sequence):
    registry.register(_module.LOADER)
mixture.MODES["stratified"] = stratified.source
