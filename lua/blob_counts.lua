-- blob_counts.lua: how many of a window's items and archived rows refer to each of some blobs,
-- for a sweep (contextstore/plans/blobs.py).
-- needs: core
-- KEYS: blobs (of the window keys, lib/core.lua).
-- ARGV: the blobs' shas. Reply: their counts (nil: none, or no window), in ARGV's order.
return redis.call('HMGET', K_BLOBS, unpack(ARGV))
