-- read.lua: one consistent read of a window (no writes, no TTL re-arm).
-- needs: archive
-- KEYS: the window keys (lib/core.lua).
-- ARGV[1]: 'fifo' (arrival order), 'order' (build order), 'pinned' (pinned, build order),
--          'build' (the read of a build, see below),
--          'meta' (no items), 'get' (ARGV[2] = one id), 'archived' (ARGV[2] = a summary id: the
--          items it replaced, none when the archive has no unexpired entry for it) or 'all'
--          (every key, raw: see below)
-- ARGV[2]: comma-separated types to keep ('' = all); ARGV[3]: keep the last N (-1 = all)
-- Reply: {meta as a flat field/value array (empty if the window does not exist),
--         pinned count, {item JSON...}}
local meta = redis.call('HGETALL', K_META)
if #meta == 0 and ARGV[1] ~= 'all' then return {{}, 0, {}} end
local mode = ARGV[1]
local npinned = redis.call('SCARD', K_PINNED)
if mode == 'meta' then return {meta, npinned, {}} end
if mode == 'all' then
  -- every key as it is, for verify(): {meta, npinned, items, fifo, order, pinned, attrs,
  -- scores, groups, calls, ids with a cached vector}; scores: id -> the build-order score its :attrs give (score() owns
  -- the formula)
  local attrs, scores = redis.call('HGETALL', K_ATTRS), {}
  for i = 1, #attrs, 2 do
    local a = unpack_attrs(attrs[i + 1])
    if a.seq and RANK[a.type] then
      scores[#scores + 1] = attrs[i]
      scores[#scores + 1] = score(a.type, a.priority, a.seq)
    end
  end
  return {meta, npinned, redis.call('HGETALL', K_ITEMS), redis.call('LRANGE', K_FIFO, 0, -1),
    redis.call('ZRANGE', K_ORDER, 0, -1, 'WITHSCORES'), redis.call('SMEMBERS', K_PINNED),
    attrs, scores, redis.call('HGETALL', K_GROUPS), redis.call('HGETALL', K_CALLS),
    redis.call('HKEYS', K_VECTORS)}
end
if mode == 'archived' then
  local out = {}
  for i, row in ipairs(archive_get(ARGV[2]) or {}) do out[i] = row[1] end
  return {meta, npinned, out}
end
if mode == 'build' then
  -- {meta, npinned, {item JSON...}, {id...}}: every id in build order, and the JSON only of the
  -- items a client lacks: those with a seq above ARGV[3] when ARGV[2] is the window's epoch
  -- (the client cached the rest, contextstore/itemcache.py), else all of them
  local epoch = ''
  for i = 1, #meta, 2 do
    if meta[i] == F.EPOCH then epoch = meta[i + 1] end
  end
  local known = (ARGV[2] ~= '' and ARGV[2] == epoch) and tonumber(ARGV[3]) or -1
  local order, ids, want = redis.call('ZRANGE', K_ORDER, 0, -1, 'WITHSCORES'), {}, {}
  for i = 1, #order, 2 do
    local id = order[i]
    ids[#ids + 1] = id
    if tonumber(order[i + 1]) % PRIORITY_WEIGHT > known then want[#want + 1] = id end
  end
  local out = {}
  for i = 1, #want, 500 do
    local chunk = redis.call('HMGET', K_ITEMS, unpack(want, i, math.min(i + 499, #want)))
    for j = 1, #chunk do out[#out + 1] = chunk[j] end
  end
  return {meta, npinned, out, ids}
end
if mode == 'get' then
  local j = redis.call('HGET', K_ITEMS, ARGV[2])
  return {meta, npinned, j and {j} or {}}
end

local ids
if mode == 'fifo' then
  ids = redis.call('LRANGE', K_FIFO, 0, -1)
elseif mode == 'order' or mode == 'pinned' then
  ids = redis.call('ZRANGE', K_ORDER, 0, -1)
else
  return fail('BADARG', 'mode')
end
if mode == 'pinned' then
  local keep = {}
  for _, id in ipairs(ids) do
    if redis.call('SISMEMBER', K_PINNED, id) == 1 then keep[#keep + 1] = id end
  end
  ids = keep
end
if ARGV[2] ~= '' and #ids > 0 then
  local want = {}
  for t in string.gmatch(ARGV[2], '[^,]+') do want[t] = true end
  local keep = {}
  for i = 1, #ids, 500 do
    local chunk = redis.call('HMGET', K_ATTRS, unpack(ids, i, math.min(i + 499, #ids)))
    for j = 1, #chunk do
      if chunk[j] and want[unpack_attrs(chunk[j]).type] then keep[#keep + 1] = ids[i + j - 1] end
    end
  end
  ids = keep
end
local limit = tonumber(ARGV[3]) or -1
local first = 1
if limit >= 0 and #ids > limit then first = #ids - limit + 1 end
local out = {}
for i = first, #ids, 500 do
  local chunk = redis.call('HMGET', K_ITEMS, unpack(ids, i, math.min(i + 499, #ids)))
  for j = 1, #chunk do
    if chunk[j] then out[#out + 1] = chunk[j] end
  end
end
return {meta, npinned, out}
