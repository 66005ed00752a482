"""Old path of :mod:`shmspec.conformance.commands.spectests` (before
commit 9a6edc8, 2026-12-01), kept so ``python -m shmspec.conformance.spectests`` still runs."""

import sys

from .commands.spectests import *  # noqa: F401,F403
from .commands.spectests import main

if __name__ == "__main__":
    sys.exit(main())
