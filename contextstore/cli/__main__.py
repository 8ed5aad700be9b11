"""``python -m contextstore.cli``: the ``contextstore`` command."""

import sys

from . import main

sys.exit(main())
