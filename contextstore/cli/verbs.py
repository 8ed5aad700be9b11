"""Every verb of the ``contextstore`` command, registered on ``app.cli`` by importing its module
(in the order ``--help`` lists them)."""

from . import admin, branches, compactor, editing, listing, moving, reading, watch

__all__ = ["admin", "branches", "compactor", "editing", "listing", "moving", "reading", "watch"]
