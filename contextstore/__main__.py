"""``python -m contextstore``: the ``contextstore`` command."""

import sys

from .cli import main

sys.exit(main())
