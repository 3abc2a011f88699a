"""``python -m kafkatw.cli``: the same as the ``kafkatw`` console script."""

import sys

from kafkatw.cli.main import main

sys.exit(main())
