"""``python -m kontinue.restore``: the same program as the ``kontinue-restore`` console script."""

import sys

from kontinue.restore import program

sys.exit(program.main())
