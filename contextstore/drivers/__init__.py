"""The I/O drivers: the only code that talks to Redis or starts a process.

- ``sync`` and ``aio``: ``ContextStore`` / ``ContextWindow`` and their asyncio twins, thin shells
  that drive the plans (``plans``) over a redis-py client;
- ``store``: what both stores share (options, construction, retries) and ``StoreDriver``, the
  driver interface of ``plans.driver`` that the loops below and the turns take;
- ``streaming``, ``listing``, ``compacting``: the loops that follow streams, list windows and run
  the background compactor over a driver;
- ``scripts`` (the Lua scripts: the function library, ``EVALSHA`` where it is not loaded,
  and calling them), ``plain_reads`` (a plan's reads in one ``MULTI``/``EXEC``), ``blob_io``
  (the blobs' payloads and their sweep), ``admin`` (loading the scripts for users who may not),
  ``loops`` (one asyncio client per event loop), ``durability`` (``WAIT``), ``redis_failures``
  (redis-py's exceptions mapped to ours), ``embedded`` (the bundled server).

May import: ``core``, ``plans``, ``types``, ``errors``, ``events``, ``compactor``, ``turns``,
``metrics``; never ``cli`` or ``integrations``.
"""
