"""``python -m chaos``: the chaos tool, the same as ``stormlab chaos``."""

import sys

from chaos.cli import main

sys.exit(main())
