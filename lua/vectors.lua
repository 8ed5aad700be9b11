-- vectors.lua: the window's cache of item embeddings (EmbeddingScorer).
-- needs: core
-- KEYS: meta, items, vectors (of the window keys, lib/core.lua).
-- ARGV[1]: 'get', then item ids: Reply: their cached values (false where none).
-- ARGV[1]: 'put', then (id, value) pairs: caches each value whose item still exists (a vector
--   never outlives its item: removals delete it); the cache takes the window's remaining TTL.
--   Reply: the number cached.
-- A value is "<scorer tag>|<sha1 of the item's content>|<base64 float32 vector>"; the reader
-- checks tag and sha1, so a vector of other content is never used.
local op = ARGV[1]
if op == 'get' then
  local out = {}
  for i = 2, #ARGV, 500 do
    for _, v in ipairs(redis.call('HMGET', K_VECTORS, unpack(ARGV, i, math.min(i + 499, #ARGV)))) do
      out[#out + 1] = v
    end
  end
  return out
elseif op == 'put' then
  local n = 0
  for i = 2, #ARGV - 1, 2 do
    if redis.call('HEXISTS', K_ITEMS, ARGV[i]) == 1 then
      redis.call('HSET', K_VECTORS, ARGV[i], ARGV[i + 1])
      n = n + 1
    end
  end
  local pttl = redis.call('PTTL', K_META)
  if n > 0 and pttl > 0 then redis.call('PEXPIRE', K_VECTORS, pttl) end
  return n
end
return fail('BADARG', 'vectors op')
