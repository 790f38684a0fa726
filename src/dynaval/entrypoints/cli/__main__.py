"""``python -m dynaval.entrypoints.cli``: the ``dynaval`` command."""

import sys

from dynaval.entrypoints.cli.main import main

sys.exit(main())
