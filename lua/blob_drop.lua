-- blob_drop.lua: act on what a sweep found of one blob (contextstore/plans/blobs.py).
-- needs: core
-- KEYS: data, index (of a blob's keys: contextstore/core/blobs.py).
-- ARGV[1]: the blob's sha; ARGV[2]: its index entry as the sweep read it; ARGV[3..]: the holders
--   that no longer refer to it (their :blobs counts nothing for it, or they are gone).
-- When the entry is no longer what the sweep read (the blob was stored again since), nothing
-- happens. Else the blob is dropped when none of its holders is left, or those holders leave it.
-- Reply: 1 when the blob was dropped, else 0.
local sha, seen = ARGV[1], ARGV[2]
if redis.call('HGET', KEYS[2], sha) ~= seen then return 0 end
local gone = {}
for i = 3, #ARGV do gone[ARGV[i]] = true end
local holders, kept = words(seen), {}
for i = 2, #holders do
  if not gone[holders[i]] then kept[#kept + 1] = holders[i] end
end
if #kept == 0 then
  redis.call('DEL', KEYS[1])
  redis.call('HDEL', KEYS[2], sha)
  return 1
end
redis.call('HSET', KEYS[2], sha, holders[1] .. ' ' .. table.concat(kept, ' '))
return 0
