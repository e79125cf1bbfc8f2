"""``python -m skslot``: the command line (see :mod:`skslot.cli`)."""

import sys

from .cli import main

sys.exit(main())
