"""``python -m batchloaders`` runs the command line (see :mod:`batchloaders.cli.main`)."""
from batchloaders.cli.main import main

if __name__ == "__main__":
    main()
