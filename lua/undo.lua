-- undo.lua: put back the items a summary replaced and remove the summary, atomically.
-- needs: archive
-- KEYS: the window keys (lib/core.lua). ARGV[1..N_CONFIG]: caller config (unused).
-- ARGV[N_CONFIG + 1]: the summary id.
-- The items come back exactly as they were stored (ids, seq, content, groups, tool calls), in
--   their places in arrival order; limits are checked, not applied: if they no longer fit,
--   {'!', 'FULL', unit, current, max, requested}. {'!', 'NOSUMMARY', id, where} when the archive
--   has no (unexpired) entry for it, or the summary is no longer in the window; {'!', 'INUSE',
--   what, name} when one of their ids, tool call ids or groups is in use again.
-- Reply: the number of items put back.
local cfg = read_config()
local summary_id = ARGV[N_CONFIG + 1]
if cfg == nil or cfg.new then return fail('NOSUMMARY', summary_id, 'window') end
local rows = archive_get(summary_id)
if not rows then return fail('NOSUMMARY', summary_id, 'archive') end
local packed = redis.call('HGET', K_ATTRS, summary_id)
if not packed then return fail('NOSUMMARY', summary_id, 'window') end
local summary = unpack_attrs(packed)

-- an archived row as store_item takes it
local function item_of(row)
  local it, doc = unpack_attrs(row[2]), cjson.decode(row[1])
  it.id, it.json, it.pinned, it.calls = archived_id(row), lean_json(row[1]), false, {}
  local meta = doc.metadata
  if it.group ~= '' and type(meta) == 'table' and type(meta.tool_calls) == 'table' then
    for _, call in ipairs(meta.tool_calls) do it.calls[#it.calls + 1] = {id = call.id, name = call['function'].name} end
  end
  return it
end

-- the first id, tool call id or group of `items` in use again: what, name
local function in_use(items)
  local groups = {}
  for _, it in ipairs(items) do
    if redis.call('HEXISTS', K_ITEMS, it.id) == 1 then return 'item id', it.id end
    for _, call in ipairs(it.calls) do
      if redis.call('HEXISTS', K_CALLS, call.id) == 1 then return 'tool call id', call.id end
    end
    if it.group ~= '' and not groups[it.group] then
      if redis.call('HEXISTS', K_GROUPS, it.group) == 1 then return 'group', it.group end
      groups[it.group] = true
    end
  end
  return nil
end

-- :fifo again in seq order (arrival order) with the items put back
local function rebuild_fifo()
  local ids, rows = redis.call('LRANGE', K_FIFO, 0, -1), {}
  for i = 1, #ids, 500 do
    local attrs = redis.call('HMGET', K_ATTRS, unpack(ids, i, math.min(i + 499, #ids)))
    for j, a in ipairs(attrs) do rows[#rows + 1] = {unpack_attrs(a).seq, ids[i + j - 1]} end
  end
  table.sort(rows, function(x, y) return x[1] < y[1] end)
  for i, row in ipairs(rows) do ids[i] = row[2] end
  redis.call('DEL', K_FIFO)
  for i = 1, #ids, 500 do redis.call('RPUSH', K_FIFO, unpack(ids, i, math.min(i + 499, #ids))) end
end

local items, tokens = {}, 0
for i, row in ipairs(rows) do
  items[i] = item_of(row)
  tokens = tokens + items[i].tokens
end
table.sort(items, function(x, y) return x.seq < y.seq end)
if cfg.max_tokens > 0 and cfg.tokens - summary.tokens + tokens > cfg.max_tokens then
  return fail('FULL', 'tokens', cfg.tokens, cfg.max_tokens, tokens - summary.tokens)
end
if cfg.items - 1 + #items > cfg.max_items then
  return fail('FULL', 'items', cfg.items, cfg.max_items, #items - 1)
end
local what, name = in_use(items)
if what then return fail('INUSE', what, name) end

remove_many({summary_id}, 'undo')
for _, it in ipairs(items) do
  store_item(it, it.json)
  count_added(it)
end
rebuild_fifo()
new_epoch()  -- the items come back with their old seqs
archive_drop(summary_id)
event('summary_undone', 'summary_id', summary_id, 'items_restored', fmt(#items),
  'total_tokens_after', fmt(meta_get(F.TOKENS)))
rearm_ttl(cfg)
return #items
