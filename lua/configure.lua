-- configure.lua: change a window's config for every worker, atomically.
-- needs: items
-- KEYS: the eleven window keys. ARGV[1..N_CONFIG]: caller config (used if the window does not exist).
-- ARGV[N_CONFIG + 1..]: field/value pairs among max_tokens (0 = none), max_items, threshold,
--   strategy, ttl (0 = none), keep_recent, clear_at_least, clear_exclude (tool names),
--   warn_percent, events_maxlen.
-- Lowering max_items below the item count evicts the oldest whole units (a group, or an
-- ungrouped item; reason eviction); if pinned items alone keep it above: {'!', 'FULL', 'items',
-- count, max_items, 0}, nothing written. Lowering max_tokens compacts nothing now: the next add
-- does.
-- Reply: the config after the change, in layout.Meta.CONFIG order.

local CHANGEABLE = {[F.MAX_TOKENS] = 'max_tokens', [F.MAX_ITEMS] = 'max_items', [F.THRESHOLD] = 'threshold',
  [F.STRATEGY] = 'strategy', [F.TTL] = 'ttl', [F.KEEP_RECENT] = 'keep_recent',
  [F.CLEAR_AT_LEAST] = 'clear_at_least', [F.CLEAR_EXCLUDE] = 'clear_exclude', [F.WARN_PERCENT] = 'warn_percent',
  [F.EVENTS_MAXLEN] = 'events_maxlen'}
local TEXT = {strategy = true, clear_exclude = true}

-- The oldest whole units to evict so that `count` items fit `max_items`; nil if units with a
-- pinned member alone exceed it.
local function over_cap(count, max_items)
  local evict, taken, blocked, pinned = {}, {}, {}, {}
  for _, id in ipairs(redis.call('SMEMBERS', K_PINNED)) do pinned[id] = true end
  for _, id in ipairs(redis.call('LRANGE', K_FIFO, 0, -1)) do
    if count - #evict <= max_items then break end
    local group = unpack_attrs(redis.call('HGET', K_ATTRS, id)).group
    local unit = group == '' and {id} or group_members(group)
    local ok = not taken[id] and not blocked[group]
    for _, m in ipairs(ok and unit or {}) do ok = ok and not pinned[m] end
    if ok then
      for _, m in ipairs(unit) do evict[#evict + 1], taken[m] = m, true end
    elseif group ~= '' then
      blocked[group] = true
    end
  end
  if count - #evict > max_items then return nil end
  return evict
end

local cfg = read_config()
if not cfg then return fail('BADARG', 'config') end
local c = {}
for _, key in pairs(CHANGEABLE) do c[key] = cfg[key] end
c.item_limit = cfg.item_limit
local fields = {}
for i = N_CONFIG + 1, #ARGV, 2 do
  local f, v = ARGV[i], ARGV[i + 1]
  local key = CHANGEABLE[f]
  if not key then return fail('BADARG', 'field ' .. tostring(f)) end
  if TEXT[key] then c[key] = v else c[key] = tonumber(v) end
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
  F.THRESHOLD, tostring(c.threshold), F.STRATEGY, c.strategy, F.TTL, fmt(c.ttl),
  F.KEEP_RECENT, fmt(c.keep_recent), F.CLEAR_AT_LEAST, fmt(c.clear_at_least), F.CLEAR_EXCLUDE, c.clear_exclude,
  F.WARN_PERCENT, tostring(c.warn_percent), F.EVENTS_MAXLEN, fmt(c.events_maxlen))
CFG = c
for _, id in ipairs(evict) do remove_many({id}, 'eviction') end
if #fields > 0 then event('configured', unpack(fields)) end
rearm_ttl(c, true)
return {fmt(c.max_tokens), fmt(c.max_items), fmt(cfg.item_limit), tostring(c.threshold), c.strategy, fmt(c.ttl),
  fmt(c.keep_recent), fmt(c.clear_at_least), c.clear_exclude, tostring(c.warn_percent), fmt(c.events_maxlen)}
