-- blob_put.lua: store a blob (contextstore/core/blobs.py), or note that a window stores it again.
-- needs: core
-- KEYS: data, index (of a blob's keys: contextstore/core/blobs.py).
-- ARGV[1]: the blob's sha; ARGV[2]: its payload ('': only note it, after the add that refers to
--   it); ARGV[3]: the window whose add refers to it.
-- The payload is written when the blob is new (the same sha: the same payload); the index entry
-- of the blob, "<server ms> <holder> ...", takes the time now and the window among its holders:
-- a sweep leaves a blob stored within GRACE_MS alone (the add that refers to it may still come).
-- Reply: 1; 0 when ARGV[2] is '' and the blob is gone (a sweep took it before the add: the
-- caller stores it again), nothing written.
local sha, wid = ARGV[1], ARGV[3]
if ARGV[2] == '' then
  if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
else
  redis.call('SET', KEYS[1], ARGV[2], 'NX')
end
local holders = words(redis.call('HGET', KEYS[2], sha))
table.remove(holders, 1)
local listed = false
for _, h in ipairs(holders) do listed = listed or h == wid end
if not listed then holders[#holders + 1] = wid end
redis.call('HSET', KEYS[2], sha, fmt(now_ms()) .. ' ' .. table.concat(holders, ' '))
return 1
