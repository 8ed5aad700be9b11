"""Rendering a window's items, pure functions without I/O: ``prompt`` (the token-budgeted
prompt text and the choice of what fits) and ``markdown`` (a ``## Context`` document).

May import: ``core``, ``types``, ``errors``; no I/O (no redis, asyncio, subprocess or HTTP).
"""
