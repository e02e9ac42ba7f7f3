"""``python -m naiad_operator``: the same as the ``naiad-operator`` console script."""

import sys

from naiad_operator.cli import main

sys.exit(main())
