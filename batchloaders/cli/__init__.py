"""The ``batchloaders`` command line and the commands it runs (describe, bench, preview, the data tools).

Commands that read data files import TensorFlow; the command line imports them only inside those commands.
"""
from batchloaders.cli.main import main

__all__ = ["main"]
