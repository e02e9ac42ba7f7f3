"""``python -m naiad.workers CHANNEL_FD REQUEST_ARENA_FD RESPONSE_ARENA_FD``: started by the engine."""

import sys

from naiad.workers.process import main

sys.exit(main(sys.argv[1:]))
