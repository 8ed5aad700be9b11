"""The I/O drivers: the only code that talks to Redis or starts a process.

- ``sync`` and ``aio``: ``ContextStore`` / ``ContextWindow`` and their asyncio twins, thin shells
  that drive the plans (``plans``) over a redis-py client;
- ``store``: what both stores share (options, construction, retries) and ``StoreDriver``, the
  driver interface of ``plans.driver`` that the loops below and the turns take;
- ``streaming``, ``listing``, ``compacting``: the loops that follow streams, list windows and run
  the background compactor over a driver;
- ``direct`` (the lean ``FCALL`` / ``EVALSHA`` path), ``loops`` (one asyncio client per event
  loop), ``scripts`` (loading the Lua scripts and calling them), ``durability`` (``WAIT``),
  ``redis_failures`` (redis-py's exceptions mapped to ours), ``embedded`` (the bundled server).

May import: ``core``, ``plans``, ``types``, ``errors``, ``events``, ``compactor``, ``turns``,
``metrics``; never ``cli`` or ``integrations``.
"""
