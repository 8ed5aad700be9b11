-- configure.lua: change a window's config for every worker, atomically.
-- needs: items
-- KEYS: the nine window keys. ARGV[1..6]: caller config (used if the window does not exist).
-- ARGV[7..]: field/value pairs among max_tokens (0 = none), max_items, threshold, strategy,
--   ttl (0 = none).
-- Lowering max_items below the item count evicts the oldest unpinned items (reason eviction);
-- if pinned items alone exceed it: {'!', 'FULL', 'items', count, max_items, 0}, nothing written.
-- Lowering max_tokens compacts nothing now: the next add does.
-- Reply: {max_tokens, max_items, item_limit, threshold, strategy, ttl} after the change.

local CHANGEABLE = {[F.MAX_TOKENS] = 'max_tokens', [F.MAX_ITEMS] = 'max_items',
  [F.THRESHOLD] = 'threshold', [F.STRATEGY] = 'strategy', [F.TTL] = 'ttl'}

-- The oldest unpinned ids to evict so that `count` items fit `max_items`; nil if pinned items
-- alone exceed it.
local function over_cap(count, max_items)
  local need, evict, pinned = count - max_items, {}, {}
  for _, id in ipairs(redis.call('SMEMBERS', K_PINNED)) do pinned[id] = true end
  for _, id in ipairs(redis.call('LRANGE', K_FIFO, 0, -1)) do
    if #evict >= need then break end
    if not pinned[id] then evict[#evict + 1] = id end
  end
  if #evict < need then return nil end
  return evict
end

local cfg = read_config()
if not cfg then return fail('BADARG', 'config') end
local c = {max_tokens = cfg.max_tokens, max_items = cfg.max_items, item_limit = cfg.item_limit,
  threshold = cfg.threshold, strategy = cfg.strategy, ttl = cfg.ttl}
local fields = {}
for i = 7, #ARGV, 2 do
  local f, v = ARGV[i], ARGV[i + 1]
  local key = CHANGEABLE[f]
  if not key then return fail('BADARG', 'field ' .. tostring(f)) end
  c[key] = key == 'strategy' and v or tonumber(v)
  fields[#fields + 1] = f
  fields[#fields + 1] = v
end
if not valid_config(c) then return fail('BADARG', 'config') end
local evict = {}
if not cfg.new and cfg.items > c.max_items then
  evict = over_cap(cfg.items, c.max_items)
  if not evict then return fail('FULL', 'items', cfg.items, c.max_items, 0) end
end

persist_config(cfg)
redis.call('HSET', K_META, F.MAX_TOKENS, fmt(c.max_tokens), F.MAX_ITEMS, fmt(c.max_items),
  F.THRESHOLD, tostring(c.threshold), F.STRATEGY, c.strategy, F.TTL, fmt(c.ttl))
for _, id in ipairs(evict) do remove_many({id}, 'eviction') end
if #fields > 0 then event('configured', unpack(fields)) end
rearm_ttl(c, true)
return {fmt(c.max_tokens), fmt(c.max_items), fmt(cfg.item_limit), tostring(c.threshold), c.strategy, fmt(c.ttl)}
