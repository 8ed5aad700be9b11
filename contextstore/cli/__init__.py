"""The ``contextstore`` command (Click and Rich): inspect, edit, watch and move context windows
from a terminal, run the background compactor, the embedded server and the demo.

Exit codes: 0 success, 1 an error (Redis unreachable, a missing window or item, a broken
window, a refused operation), 2 a usage error (a bad option, argument or input value). An
expected failure prints one line on stderr, never a traceback; ``-v`` shows the library's log.

May import: the public package (``contextstore``), ``compactor``, ``turns``, ``render``,
``relevance``, ``summarize``, ``events``, ``core``, ``types``, ``errors``; never the drivers.
"""

from __future__ import annotations

from . import verbs  # noqa: F401  (registers every verb on ``cli``)
from .app import EXIT_ERROR, EXIT_OK, EXIT_USAGE, cli, main

__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "cli", "main"]
