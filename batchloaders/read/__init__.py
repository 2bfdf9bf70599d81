"""Reading data files: listing and sharding them, checking their framing and counts, parsing records.

Imports only :mod:`batchloaders.config` and :mod:`batchloaders.errors` of the package.
"""
