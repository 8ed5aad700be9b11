"""One plan per operation, shared by the sync and the asyncio API (sans-I/O).

A plan is a generator: it validates its input, yields requests (``ScriptCall`` to run a Lua
script, ``External`` to call a summarizer or relevance scorer), receives their replies, and
returns the decoded result. ``drivers.sync`` and ``drivers.aio`` drive the same plans; only the
I/O differs. One module per capability: ``window`` (attach, config, stats, verify, delete),
``items`` (add, read, remove, pin, priority, clear), ``compaction``, ``build`` (prompts and
markdown), ``snapshot`` (snapshot, restore), ``summaries``, ``relevance``, ``reads``; ``base``
holds what they share, and ``driver`` the interface the loops outside the stores run plans on.

May import: ``core``, ``render``, ``relevance``, ``logs``, ``types``, ``usage``, ``errors``; no I/O (no redis,
asyncio, subprocess or HTTP).
"""
