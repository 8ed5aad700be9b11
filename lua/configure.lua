-- configure.lua: change a window's config for every worker, atomically.
-- needs: items
-- KEYS: the window keys (lib/core.lua). ARGV[1..N_CONFIG]: caller config (used if the window does not exist).
-- ARGV[N_CONFIG + 1..]: field/value pairs among max_tokens (0 = none), max_items, threshold,
--   strategy, ttl (0 = none), keep_recent, clear_at_least, clear_exclude (tool names),
--   warn_percent, events_maxlen, archive_ttl, target (0 = 15 below threshold) (every config field but
--   item_limit).
-- Lowering max_items below the item count evicts the oldest whole units (a group, or an
-- ungrouped item; reason eviction); if pinned items alone keep it above: {'!', 'FULL', 'items',
-- count, max_items, 0}, nothing written. Lowering max_tokens compacts nothing now: the next add
-- does. A change starts a new epoch (layout.Meta.EPOCH).
-- Reply: the config after the change, in layout.Meta.CONFIG order.

local CHANGEABLE = {}
for _, f in ipairs(CONFIG_FIELDS) do
  if f ~= F.ITEM_LIMIT then CHANGEABLE[f] = true end
end

-- The oldest whole units to evict so that `count` items fit `max_items`; nil if units with a
-- pinned member alone exceed it.
local function over_cap(count, max_items)
  local evict, taken, blocked, pinned = {}, {}, {}, {}
  for _, id in ipairs(redis.call('SMEMBERS', K_PINNED)) do pinned[id] = true end
  for _, id in ipairs(redis.call('LRANGE', K_FIFO, 0, -1)) do
    if count - #evict <= max_items then break end
    local group = unpack_attrs(redis.call('HGET', K_ATTRS, id), id).group
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
for _, f in ipairs(CONFIG_FIELDS) do c[f] = cfg[f] end
local fields = {}
for i = N_CONFIG + 1, #ARGV, 2 do
  local f, v = ARGV[i], ARGV[i + 1]
  if not CHANGEABLE[f] then return fail('BADARG', 'field ' .. tostring(f)) end
  if CONFIG_TEXT[f] then c[f] = v else c[f] = tonumber(v) end
  fields[#fields + 1] = f
  fields[#fields + 1] = v
end
if not valid_config(c) then return fail('BADARG', 'config') end
local evict = {}
if not cfg.new and cfg.items > c.max_items then
  evict = over_cap(cfg.items, c.max_items)
  if not evict then return fail('FULL', 'items', cfg.items, c.max_items, 0) end
end

local evicting = removal(evict)  -- read and checked before the first write
persist_config(cfg)
redis.call('HSET', K_META, unpack(config_pairs(c)))
CFG = c
remove_many(evict, 'eviction', evicting)
if #fields > 0 then
  event('configured', unpack(fields))
  new_epoch()  -- what clients cached of the window (a build's config with its items) is stale
end
rearm_ttl(c, true)
return config_list(c)
