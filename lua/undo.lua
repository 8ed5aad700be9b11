-- undo.lua: put back the items a summary replaced and remove the summary, atomically.
-- needs: archive
-- KEYS: the window keys (lib/core.lua). A missing window is not made.
-- ARGV[1]: the summary id.
-- The items come back exactly as they were stored (ids, seq, content, groups, tool calls), in
--   their places in arrival order; limits are checked, not applied: if they no longer fit,
--   {'!', 'FULL', unit, current, max, requested}. {'!', 'NOSUMMARY', id, where} when the archive
--   has no (unexpired) entry for it, or the summary is no longer in the window; {'!', 'INUSE',
--   what, name} when one of their ids, tool call ids or groups is in use again.
-- Reply: the number of items put back.
local cfg = stored_config()
local summary_id = ARGV[1]
if not cfg then return fail('NOSUMMARY', summary_id, 'window') end
local rows = archive_get(summary_id)
if not rows then return fail('NOSUMMARY', summary_id, 'archive') end
local packed = redis.call('HGET', K_ATTRS, summary_id)
if not packed then return fail('NOSUMMARY', summary_id, 'window') end
local summary = unpack_attrs(packed, summary_id)

-- an archived row as store_item takes it (archive_get checked its shape; corrupt() for a body
-- or tool calls in a shape no script writes)
local function item_of(row)
  local it, doc = parse_attrs(row[2]), stored_object(K_ARCHIVE, summary_id, row[1])
  it.id, it.json, it.pinned, it.calls = archived_id(row, summary_id), lean_json(row[1]), false, {}
  if not it.json then corrupt(K_ARCHIVE, summary_id, 'an item body in another shape') end
  local meta = doc.metadata
  if it.group ~= '' and type(meta) == 'table' and type(meta.tool_calls) == 'table' then
    for _, call in ipairs(meta.tool_calls) do
      local name = type(call) == 'table' and type(call['function']) == 'table' and call['function'].name
      if type(call.id) ~= 'string' or type(name) ~= 'string' then corrupt(K_ARCHIVE, summary_id, 'a tool call') end
      it.calls[#it.calls + 1] = {id = call.id, name = name}
    end
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

-- :fifo's ids but the summary with the items put back, in seq order (arrival order): read and
-- checked before the first write
local function new_fifo(items)
  local ids, rows = redis.call('LRANGE', K_FIFO, 0, -1), {}
  for i = 1, #ids, 500 do
    local attrs = redis.call('HMGET', K_ATTRS, unpack(ids, i, math.min(i + 499, #ids)))
    for j, a in ipairs(attrs) do
      local id = ids[i + j - 1]
      if id ~= summary_id then rows[#rows + 1] = {unpack_attrs(a, id).seq, id} end
    end
  end
  for _, it in ipairs(items) do rows[#rows + 1] = {it.seq, it.id} end
  table.sort(rows, function(x, y) return x[1] < y[1] end)
  local out = {}
  for i, row in ipairs(rows) do out[i] = row[2] end
  return out
end

local function write_fifo(ids)
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
local fifo, gone = new_fifo(items), removal({summary_id})

remove_many({summary_id}, 'undo', gone)
for _, it in ipairs(items) do
  store_item(it, it.json)
  count_added(it)
end
write_fifo(fifo)
new_epoch()  -- the items come back with their old seqs
archive_drop(summary_id)
event('summary_undone', 'summary_id', summary_id, 'items_restored', fmt(#items),
  'total_tokens_after', fmt(meta_get(F.TOKENS)))
rearm_ttl(cfg)
return #items
