"""Commands that read data files: ``check-data``, ``verify`` and ``manifest`` (see :mod:`batchloaders.cli`).

Every module here but :mod:`batchloaders.tools.progress` imports TensorFlow;
the command line imports them only inside those commands.
"""
