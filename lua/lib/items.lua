-- lib/items.lua: storing and removing items with every structure and counter kept true.
-- needs: meta events

local function score(itype, priority, seq)
  return fmt(RANK[itype] * RANK_WEIGHT + (MAX_PRIORITY - priority) * PRIORITY_WEIGHT + seq)
end

local function pack_attrs(seq, tokens, priority, itype)
  return fmt(seq) .. '|' .. fmt(tokens) .. '|' .. fmt(priority) .. '|' .. itype
end

local function unpack_attrs(v)
  local seq, tok, pr, ty = string.match(v, '^(%d+)|(%d+)|(%d+)|([%w_]+)$')
  return {seq = tonumber(seq), tokens = tonumber(tok), priority = tonumber(pr), type = ty}
end

-- The head of a stored item's JSON: the fields the scripts write themselves, in the stored
-- order (contextstore/stored.py); `it.tail` (client-encoded) completes the object.
local function item_head(it)
  return '{"priority":' .. fmt(it.priority) .. ',"pinned":' .. (it.pinned and 'true' or 'false')
    .. ',"seq":' .. fmt(it.seq) .. ',"id":' .. cjson.encode(it.id) .. ',"added_at_us":' .. fmt(it.ts)
    .. ','
end

-- Parse one item from ARGV[b+1..b+6] (id or '', body JSON, type, tokens, priority, pinned).
local function parse_item(b)
  local it = {
    id = ARGV[b + 1], body = ARGV[b + 2], type = ARGV[b + 3], tokens = tonumber(ARGV[b + 4]),
    priority = tonumber(ARGV[b + 5]), pinned = ARGV[b + 6] == '1',
  }
  if not RANK[it.type] or not is_int(it.tokens, 1, MAX_TOKENS)
      or not is_int(it.priority, 0, MAX_PRIORITY) or string.sub(it.body, 1, 9) ~= '{"type":"' then
    return nil
  end
  it.tail = string.sub(it.body, 2)
  return it
end

-- Store one new item: it = {id, seq, ts, tail, type, tokens, priority, pinned}.
-- Returns the stored JSON.
local function insert_item(it)
  local json = item_head(it) .. it.tail
  redis.call('HSET', K_ITEMS, it.id, json)
  redis.call('HSET', K_ATTRS, it.id, pack_attrs(it.seq, it.tokens, it.priority, it.type))
  redis.call('ZADD', K_ORDER, score(it.type, it.priority, it.seq), it.id)
  redis.call('RPUSH', K_FIFO, it.id)
  if it.pinned then redis.call('SADD', K_PINNED, it.id) end
  bump(F.TOKENS, it.tokens)
  bump(F.ITEMS, 1)
  bump(F.TOKENS_OF .. it.type, it.tokens)
  bump(F.ITEMS_OF .. it.type, 1)
  event('item_added', 'item_id', it.id, 'type', it.type, 'token_count', fmt(it.tokens),
    'total_tokens_after', fmt(meta_get(F.TOKENS)))
  return json
end

-- Drop removed ids from the :fifo list (LREM for a few, one rewrite for many).
local function drop_from_fifo(ids, gone)
  if #ids <= 8 then
    for _, id in ipairs(ids) do redis.call('LREM', K_FIFO, 1, id) end
    return
  end
  local keep = {}
  for _, id in ipairs(redis.call('LRANGE', K_FIFO, 0, -1)) do
    if not gone[id] then keep[#keep + 1] = id end
  end
  redis.call('DEL', K_FIFO)
  for i = 1, #keep, 500 do
    redis.call('RPUSH', K_FIFO, unpack(keep, i, math.min(i + 499, #keep)))
  end
end

-- Remove stored items (all must exist), keep the counters true, one item_removed event each.
-- Batched (500 ids per command) so that removing a whole 100000-item window stays fast; the
-- deletions come before the events, so a removal also runs when Redis is at maxmemory.
-- Returns the tokens freed.
local function remove_many(ids, reason)
  if #ids == 0 then return 0 end
  local tokens, freed, gone, by_type, types = meta_get(F.TOKENS), 0, {}, {}, {}
  for i = 1, #ids, 500 do
    local chunk = {unpack(ids, i, math.min(i + 499, #ids))}
    local attrs = redis.call('HMGET', K_ATTRS, unpack(chunk))
    redis.call('HDEL', K_ITEMS, unpack(chunk))
    redis.call('HDEL', K_ATTRS, unpack(chunk))
    redis.call('ZREM', K_ORDER, unpack(chunk))
    redis.call('SREM', K_PINNED, unpack(chunk))
    for j, id in ipairs(chunk) do
      local a = unpack_attrs(attrs[j])
      tokens, freed, gone[id] = tokens - a.tokens, freed + a.tokens, true
      local c = by_type[a.type]
      if not c then
        c = {0, 0}
        by_type[a.type], types[#types + 1] = c, a.type
      end
      c[1], c[2] = c[1] + 1, c[2] + a.tokens
      event('item_removed', 'item_id', id, 'type', a.type, 'token_count', fmt(a.tokens),
        'reason', reason, 'total_tokens_after', fmt(tokens))
    end
  end
  for _, t in ipairs(types) do
    bump(F.ITEMS_OF .. t, -by_type[t][1])
    bump(F.TOKENS_OF .. t, -by_type[t][2])
  end
  bump(F.TOKENS, -freed)
  bump(F.ITEMS, -#ids)
  drop_from_fifo(ids, gone)
  return freed
end

-- add's request record keeps, per new item, its seq and time and where its arguments start;
-- a replay rebuilds the stored JSON from the replayed call's own arguments (the same request
-- carries the same arguments), so any item costs the log ~40 bytes. An item that existed
-- before the call (a safe retry of a caller id) keeps its stored head and is returned as it is
-- stored now, if it still exists.
REPLAYS.add = function(rec)
  local out = {'ok', rec[1], rec[2], rec[3]}
  for i = 4, #rec do
    local r = rec[i]
    if r[1] == '=' then
      out[#out + 1] = redis.call('HGET', K_ITEMS, r[4]) or (r[2] .. string.sub(ARGV[r[3]], 2))
    else
      local it = parse_item(r[4])
      it.seq, it.ts = tonumber(r[2]), tonumber(r[3])
      if it.id == '' then it.id = 'ctx-' .. r[2] end
      out[#out + 1] = item_head(it) .. it.tail
    end
  end
  return out
end
