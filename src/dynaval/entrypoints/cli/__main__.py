"""``python -m dynaval.entrypoints.cli``: the ``dynaval`` command. Importing the module runs
nothing (the installed-wheel test imports every module of the package)."""

import sys

from dynaval.entrypoints.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
