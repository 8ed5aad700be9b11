-- configure.lua: change a window's config for every worker, atomically.
-- KEYS: the nine window keys. ARGV[1..6]: caller config (used if the window does not exist).
-- ARGV[7..]: field/value pairs among max_tokens (0 = none), max_items, threshold, strategy,
--   ttl (0 = none).
-- Lowering max_items below the item count evicts the oldest unpinned items (reason eviction);
-- if pinned items alone exceed it: {'!', 'FULL', 'items', count, max_items, 0}, nothing written.
-- Lowering max_tokens compacts nothing now: the next add does.
-- Reply: {max_tokens, max_items, item_limit, threshold, strategy, ttl} after the change.
local cfg = read_config()
if not cfg then return fail('BADARG', 'config') end
local c = {max_tokens = cfg.max_tokens, max_items = cfg.max_items, threshold = cfg.threshold,
  strategy = cfg.strategy, ttl = cfg.ttl}
local fields = {}
for i = 7, #ARGV, 2 do
  local f, v = ARGV[i], ARGV[i + 1]
  if f == 'strategy' then c.strategy = v
  elseif f == 'max_tokens' or f == 'max_items' or f == 'threshold' or f == 'ttl' then
    c[f] = tonumber(v)
  else
    return fail('BADARG', 'field ' .. tostring(f))
  end
  fields[#fields + 1] = f
  fields[#fields + 1] = v
end
if not (is_int(c.max_tokens, 0, 1e12) and is_int(c.max_items, 1, cfg.item_limit) and c.threshold
    and c.threshold > 0 and c.threshold <= 100 and STRATEGIES[c.strategy] and is_int(c.ttl, 0, 1e9)) then
  return fail('BADARG', 'config')
end
local evict = {}
if not cfg.new and cfg.items > c.max_items then
  local need = cfg.items - c.max_items
  local pinned = {}
  for _, id in ipairs(redis.call('SMEMBERS', K_PINNED)) do pinned[id] = true end
  for _, id in ipairs(redis.call('LRANGE', K_FIFO, 0, -1)) do
    if #evict >= need then break end
    if not pinned[id] then evict[#evict + 1] = id end
  end
  if #evict < need then return fail('FULL', 'items', cfg.items, c.max_items, 0) end
end

persist_config(cfg)
redis.call('HSET', K_META, 'max_tokens', fmt(c.max_tokens), 'max_items', fmt(c.max_items),
  'threshold', tostring(c.threshold), 'strategy', c.strategy, 'ttl', fmt(c.ttl))
for _, id in ipairs(evict) do remove_many({id}, 'eviction') end
if #fields > 0 then event('configured', unpack(fields)) end
if c.ttl > 0 then
  touch(c)
else
  for _, k in ipairs(ALL_KEYS) do redis.call('PERSIST', k) end
end
return {fmt(c.max_tokens), fmt(c.max_items), fmt(cfg.item_limit), tostring(c.threshold), c.strategy, fmt(c.ttl)}
