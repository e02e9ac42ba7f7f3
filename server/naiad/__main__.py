import sys

from naiad.cli import main

sys.exit(main())
