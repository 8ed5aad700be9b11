"""The sans-I/O core: what every other layer builds on, with no socket, client or event loop.

- the window's facts shared with the Lua scripts: ``layout`` (meta fields, ranks, the score
  encoding, limits), ``keys`` (key names and their KEYS positions), ``wire`` (each script's ARGV
  and reply), ``stored`` (an item as stored);
- checks of what callers pass: ``validate``, ``toolcalls``, ``config`` (window and store
  options), ``tokens`` (token counting), ``retry`` (the retry policy), ``urls``, ``version``;
- what a store remembers and decides without I/O: ``itemcache``, ``verify`` (the consistency
  checker), ``topology`` (a cluster's slot layout), ``streams`` (the stream-reading plans).

May import: ``types``, ``errors``, ``events``; no I/O (no redis, asyncio, subprocess or HTTP).
"""
