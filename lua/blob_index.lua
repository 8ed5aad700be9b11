-- blob_index.lua: one page of a slot's blob index, for a sweep (contextstore/plans/blobs.py).
-- needs: core
-- KEYS: index (of a blob's keys: contextstore/core/blobs.py).
-- ARGV[1]: the HSCAN cursor ('0': the first page); ARGV[2]: about how many entries.
-- Reply: {the server's time in ms, the next cursor ('0': done), {sha, entry, sha, entry, ...}}.
local page = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', tonumber(ARGV[2]) or 100)
return {fmt(now_ms()), page[1], page[2]}
