-- lib/archive.lua: the items a summary replaced, kept in :archive until archive_ttl passes.
-- needs: items
--
-- :archive holds, per summary id (or rewind id), {"items": [[stored JSON, attrs, id(, 'p')], ...]}
-- (the replaced items in arrival order, 'p' on a pinned one; 0.1 kept no id, its JSON holds it), and under ARCHIVE_INDEX when each entry expires: "<summary id>=<server ms> ...".
-- Expired entries are never answered, and are dropped whenever the archive is written.

local function archive_expiries()
  local out = {}
  for _, pair in ipairs(words(redis.call('HGET', K_ARCHIVE, ARCHIVE_INDEX) or '')) do
    local id, ms = string.match(pair, '^(.+)=(%d+)$')
    if id then out[id] = tonumber(ms) end
  end
  return out
end

local function write_archive_index(expiries)
  local parts = {}
  for id, ms in pairs(expiries) do parts[#parts + 1] = id .. '=' .. fmt(ms) end
  table.sort(parts)
  hset_words(K_ARCHIVE, ARCHIVE_INDEX, parts)
end

-- Keep the stored JSON and attrs of `ids` (existing items) under `summary_id` for `ttl`
-- seconds; drop the entries that expired.
-- Drop archive entry `id`, uncounting the blobs its rows refer to (an entry in another shape,
-- which archive_get reports, counts none).
local function archive_del(id)
  if redis.call('EXISTS', K_BLOBS) == 1 then
    local ok, doc = pcall(cjson.decode, redis.call('HGET', K_ARCHIVE, id) or '')
    for _, row in ipairs(ok and type(doc) == 'table' and type(doc.items) == 'table' and doc.items or {}) do
      if type(row) == 'table' then count_blobs({row[1]}, -1) end
    end
  end
  redis.call('HDEL', K_ARCHIVE, id)
end

local function archive_put(summary_id, ids, ttl)
  local now, expiries = now_ms(), archive_expiries()
  for id, ms in pairs(expiries) do
    if ms <= now then
      archive_del(id)
      expiries[id] = nil
    end
  end
  local rows = {}
  for i, id in ipairs(ids) do
    rows[i] = {redis.call('HGET', K_ITEMS, id), redis.call('HGET', K_ATTRS, id), id}
    if redis.call('SISMEMBER', K_PINNED, id) == 1 then rows[i][4] = 'p' end
    count_blobs({rows[i][1]}, 1)
  end
  redis.call('HSET', K_ARCHIVE, summary_id, cjson.encode({items = rows}))
  expiries[summary_id] = now + ttl * 1000
  write_archive_index(expiries)
end

-- Keep `rows` ({{stored JSON, attrs, id}, ...}) under `summary_id` until server ms `expires`
-- (a restore brings an entry back with the expiry it had).
local function archive_set(summary_id, rows, expires)
  local expiries = archive_expiries()
  for _, row in ipairs(rows) do count_blobs({row[1]}, 1) end
  redis.call('HSET', K_ARCHIVE, summary_id, cjson.encode({items = rows}))
  expiries[summary_id] = expires
  write_archive_index(expiries)
end

-- Every unexpired entry as "<summary id>=<server ms it expires>", sorted.
local function archive_index()
  local out, now = {}, now_ms()
  for id, ms in pairs(archive_expiries()) do
    if ms > now then out[#out + 1] = id .. '=' .. fmt(ms) end
  end
  table.sort(out)
  return out
end

-- The archived rows of `summary_id` ({{json, attrs[, id]}, ...}), or nil when absent or expired;
-- corrupt() for an entry in a shape no script writes.
local function archive_get(summary_id)
  local ms = archive_expiries()[summary_id]
  if not ms or ms <= now_ms() then return nil end
  local raw = redis.call('HGET', K_ARCHIVE, summary_id)
  if not raw then return nil end
  local rows = stored_object(K_ARCHIVE, summary_id, raw).items
  if type(rows) ~= 'table' then corrupt(K_ARCHIVE, summary_id, 'no items') end
  for _, row in ipairs(rows) do
    if type(row) ~= 'table' or type(row[1]) ~= 'string' or type(row[2]) ~= 'string' or not parse_attrs(row[2])
        or (row[3] ~= nil and type(row[3]) ~= 'string') or (row[4] ~= nil and row[4] ~= 'p') then
      corrupt(K_ARCHIVE, summary_id, 'an item row in another shape')
    end
  end
  return rows
end

-- An archived row's id (a 0.1 row's JSON holds it).
local function archived_id(row, summary_id)
  if row[3] then return row[3] end
  local id = stored_object(K_ARCHIVE, summary_id, row[1]).id
  if type(id) ~= 'string' then corrupt(K_ARCHIVE, summary_id, 'an item without an id') end
  return id
end

-- An archived row as the client decodes an item (raw_entry; unpinned: a summary never takes
-- pinned items).
local function archived_entry(row, summary_id)
  return raw_entry(archived_id(row, summary_id), row[1], row[2], false)
end

local function archive_drop(summary_id)
  local expiries = archive_expiries()
  expiries[summary_id] = nil
  archive_del(summary_id)
  write_archive_index(expiries)
end

-- An archived row of entry `entry_id` as store_item takes it (archive_get checked its shape;
-- corrupt() for a body or tool calls in a shape no script writes). A row's fourth field 'p': the
-- item was pinned (a rewind keeps pinned items; a summary never takes one).
local function archived_item(row, entry_id)
  local it, doc = parse_attrs(row[2]), stored_object(K_ARCHIVE, entry_id, row[1])
  it.id, it.json, it.pinned, it.calls = archived_id(row, entry_id), lean_json(row[1]), row[4] == 'p', {}
  if not it.json then corrupt(K_ARCHIVE, entry_id, 'an item body in another shape') end
  local meta = doc.metadata
  if it.group ~= '' and type(meta) == 'table' and type(meta.tool_calls) == 'table' then
    for _, call in ipairs(meta.tool_calls) do
      local name = type(call) == 'table' and type(call['function']) == 'table' and call['function'].name
      if type(call.id) ~= 'string' or type(name) ~= 'string' then corrupt(K_ARCHIVE, entry_id, 'a tool call') end
      it.calls[#it.calls + 1] = {id = call.id, name = name}
    end
  end
  return it
end

-- The first id, tool call id or group of `items` in use again: what, name
local function archived_in_use(items)
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

-- :fifo's ids but `leaving` ('' none) with `items` put back, in seq order (arrival order).
local function fifo_with(items, leaving)
  local ids, rows = redis.call('LRANGE', K_FIFO, 0, -1), {}
  for i = 1, #ids, 500 do
    local attrs = redis.call('HMGET', K_ATTRS, unpack(ids, i, math.min(i + 499, #ids)))
    for j, a in ipairs(attrs) do
      local id = ids[i + j - 1]
      if id ~= leaving then rows[#rows + 1] = {unpack_attrs(a, id).seq, id} end
    end
  end
  for _, it in ipairs(items) do rows[#rows + 1] = {it.seq, it.id} end
  table.sort(rows, function(x, y) return x[1] < y[1] end)
  local out = {}
  for i, row in ipairs(rows) do out[i] = row[2] end
  return out
end

-- Whether `items` (in seq order) all come after every item of :fifo and nothing leaves: then
-- store_item's appends keep :fifo in arrival order, with no rewrite (a rewind undone before
-- anything was added: O(items back), not O(window)).
local function appended(items, leaving)
  if leaving then return false end
  local last = redis.call('LINDEX', K_FIFO, -1)
  return #items == 0 or not last or unpack_attrs(redis.call('HGET', K_ATTRS, last), last).seq < items[1].seq
end

local function write_fifo(ids)
  redis.call('DEL', K_FIFO)
  for i = 1, #ids, 500 do redis.call('RPUSH', K_FIFO, unpack(ids, i, math.min(i + 499, #ids))) end
end

-- Put the items of archive entry `entry_id` (its `rows`) back in their places, exactly as they
-- were stored, and drop the entry; `leaving` ({id, tokens}, or nil) is the item they replaced,
-- which goes (a summary). Limits are checked, not applied. Returns the items, or nil and the
-- error reply with nothing written: {'!', 'FULL', unit, current, max, requested} when they no
-- longer fit, {'!', 'INUSE', what, name} when one of their ids, tool call ids or groups is in
-- use again.
local function put_back(cfg, entry_id, rows, leaving)
  local items, tokens = {}, 0
  for i, row in ipairs(rows) do
    items[i] = archived_item(row, entry_id)
    tokens = tokens + items[i].tokens
  end
  table.sort(items, function(x, y) return x.seq < y.seq end)
  local out_tokens, out_items = leaving and leaving.tokens or 0, leaving and 1 or 0
  local limit = token_limit(cfg)
  if limit > 0 and cfg.tokens - out_tokens + tokens > limit then
    return nil, fail('FULL', 'tokens', cfg.tokens, limit, tokens - out_tokens)
  end
  if cfg.items - out_items + #items > cfg.max_items then
    return nil, fail('FULL', 'items', cfg.items, cfg.max_items, #items - out_items)
  end
  local what, name = archived_in_use(items)
  if what then return nil, fail('INUSE', what, name) end
  local fifo = not appended(items, leaving) and fifo_with(items, leaving and leaving.id or '')
  if leaving then remove_many({leaving.id}, 'undo', removal({leaving.id})) end
  local rows = {}
  for i, it in ipairs(items) do rows[i] = {it, it.json} end
  store_items(rows)
  for _, it in ipairs(items) do count_added(it) end
  if fifo then write_fifo(fifo) end
  new_epoch()  -- the items come back with their old seqs
  archive_drop(entry_id)
  return items
end
