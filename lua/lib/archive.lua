-- lib/archive.lua: the items a summary replaced, kept in :archive until archive_ttl passes.
-- needs: items
--
-- :archive holds, per summary id, {"items": [[stored JSON, attrs, id], ...]} (the replaced items in
-- arrival order; 0.1 kept no id, its JSON holds it), and under ARCHIVE_INDEX when each entry expires: "<summary id>=<server ms> ...".
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
local function archive_put(summary_id, ids, ttl)
  local now, expiries = now_ms(), archive_expiries()
  for id, ms in pairs(expiries) do
    if ms <= now then
      redis.call('HDEL', K_ARCHIVE, id)
      expiries[id] = nil
    end
  end
  local rows = {}
  for i, id in ipairs(ids) do
    rows[i] = {redis.call('HGET', K_ITEMS, id), redis.call('HGET', K_ATTRS, id), id}
  end
  redis.call('HSET', K_ARCHIVE, summary_id, cjson.encode({items = rows}))
  expiries[summary_id] = now + ttl * 1000
  write_archive_index(expiries)
end

-- Keep `rows` ({{stored JSON, attrs, id}, ...}) under `summary_id` until server ms `expires`
-- (a restore brings an entry back with the expiry it had).
local function archive_set(summary_id, rows, expires)
  local expiries = archive_expiries()
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
        or (row[3] ~= nil and type(row[3]) ~= 'string') then
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
  redis.call('HDEL', K_ARCHIVE, summary_id)
  write_archive_index(expiries)
end
