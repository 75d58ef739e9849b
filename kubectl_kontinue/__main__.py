"""``python -m kubectl_kontinue``: the same as the ``kubectl-kontinue`` console script."""

import sys

from kubectl_kontinue import cli

sys.exit(cli.main())
