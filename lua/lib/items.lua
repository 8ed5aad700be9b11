-- lib/items.lua: storing, clearing and removing items with every structure and counter true.
-- needs: meta events

-- The build-order score of :order: type rank, then priority descending, then seq. These five
-- helpers are the only Lua that encodes or decodes it (layout.order_score is the same formula;
-- tests/test_shared_facts.py checks they agree).
-- The lowest score of rank r's items of this priority (a seq adds to it).
local function band(r, priority)
  return r * RANK_WEIGHT + (MAX_PRIORITY - priority) * PRIORITY_WEIGHT
end

local function score(itype, priority, seq)
  return fmt(band(RANK[itype], priority) + seq)
end

-- An item's seq, from its score.
local function seq_of(s)
  return tonumber(s) % PRIORITY_WEIGHT
end

-- An item's priority, from its score and its type's rank r.
local function priority_of(s, r)
  return MAX_PRIORITY - math.floor((tonumber(s) - r * RANK_WEIGHT) / PRIORITY_WEIGHT)
end

-- A message's :sizes score: its size class (the bit length of its tokens: frexp's exponent),
-- then its seq (layout.size_score); nil for an item of another type, which :sizes does not hold.
local function size_score(itype, tokens, seq)
  local weight = SIZED[itype]
  if not weight then return nil end
  local _, class = math.frexp(tokens)
  return fmt(class * weight + seq)
end

-- :attrs values: "seq|tokens|priority|type", then "|flags|group" when either is set.
local function pack_attrs(a)
  local v = fmt(a.seq) .. '|' .. fmt(a.tokens) .. '|' .. fmt(a.priority) .. '|' .. a.type
  if (a.flags or '') ~= '' or (a.group or '') ~= '' then
    v = v .. '|' .. (a.flags or '') .. '|' .. (a.group or '')
  end
  return v
end

-- `flags` with the store's own 'c' (a cleared tool result); the client's letters kept.
local function cleared_flags(flags)
  if string.find(flags, 'c', 1, true) then return flags end
  return flags .. 'c'
end

-- An :attrs value as a table, or nil when it is in a shape no script writes (verify() reads
-- such values without stopping; every other reader uses unpack_attrs).
local function parse_attrs(v)
  local seq, tok, pr, ty = string.match(v or '', '^(%d+)|(%d+)|(%d+)|(.*)$')
  if not seq then return nil end
  local flags, group = '', ''
  if string.find(ty, '|', 1, true) then
    ty, flags, group = string.match(ty, '^([%w_]+)|(%a*)|(%S*)$')
    if not ty then return nil end
  end
  seq, tok, pr = tonumber(seq), tonumber(tok), tonumber(pr)
  if not RANK[ty] or seq > MAX_SEQ or tok > MAX_TOKENS or pr > MAX_PRIORITY then return nil end
  return {seq = seq, tokens = tok, priority = pr, type = ty, flags = flags, group = group}
end

-- Item `id`'s :attrs value `v` as a table; corrupt() when it is missing or in a shape no script
-- writes (called before a script's first write: nothing is written).
local function unpack_attrs(v, id)
  local a = parse_attrs(v)
  if not a then corrupt(K_ATTRS, id, v and 'not seq|tokens|priority|type[|flags|group]' or 'missing') end
  return a
end

-- :items holds per item only what no other key does: STORED_HEAD, its time (microseconds,
-- the server's clock), then the client-encoded body: '{"added_at_us":<µs>,"content":...}'
-- (role, source_ref, metadata follow when set). Its seq, tokens, priority, type, flags and
-- group live in :attrs, its pin in :pinned, its id is the hash field. The client puts them
-- together (raw_entry below; contextstore/core/stored.py decodes it).

-- A 0.1 item's body without its group (0.1 spelled it last, `null` or a string; :attrs holds
-- it now): a `,"group":` inside metadata is never followed by a JSON value and the closing brace.
local function without_group(rest)
  local at, p = nil, 1
  while true do
    local q = string.find(rest, ',"group":', p, true)
    if not q then break end
    at, p = q, q + 1
  end
  if at then
    local ok, g = pcall(cjson.decode, string.sub(rest, at + 9, -2))
    if ok and (g == cjson.null or type(g) == 'string') then return string.sub(rest, 1, at - 1) .. '}' end
  end
  return rest
end

-- An item's stored JSON in the lean layout (as it is, or made from a 0.1 item's, which spells
-- every field: the ones :attrs and :pinned hold may be stale there); nil if it is neither.
local function lean_json(json)
  if string.sub(json, 1, #STORED_HEAD) == STORED_HEAD then return json end
  local _, e, ts = string.find(json, ',"added_at_us":(%d+),"type":"[%w_]+","token_count":%d+,"content":')
  if not e then return nil end
  return STORED_HEAD .. ts .. ',"content":' .. without_group(string.sub(json, e + 1))
end

-- An item as the scripts send it: {id, stored JSON, attrs, 1 if pinned else 0}, what each key
-- holds, put together by the client (contextstore/core/stored.py decode_item), not by the server.
local function raw_entry(id, json, attrs, pinned)
  return {id, json, attrs, pinned and 1 or 0}
end

-- Hash `key` read whole (field -> value) when `n` of its fields are wanted and HGETALL costs less
-- than HMGET, else nil. Redis keeps a small hash of short values (up to hash-max-listpack-entries
-- fields, 512 by default; :attrs always, :items of short messages) as a listpack, where HMGET finds
-- each field by a scan: HMGET of most of its fields costs n^2 (1.2 ms for 500 :attrs fields on
-- Redis 7.0), one HGETALL n. A hash table answers HMGET in O(1) per field, so it keeps HMGET.
local function whole_hash(key, n)
  if n < 32 then return nil end  -- a few fields: HMGET, even scanning
  local encoding = redis.call('OBJECT', 'ENCODING', key)
  if (encoding ~= 'listpack' and encoding ~= 'ziplist') or n * 4 < redis.call('HLEN', key) then return nil end
  local flat, out = redis.call('HGETALL', key), {}
  for i = 1, #flat, 2 do out[flat[i]] = flat[i + 1] end
  return out
end

-- The values of `ids` in hash `key` (false where missing), from `whole` (whole_hash) if given.
local function hash_values(key, ids, whole)
  if not whole then return redis.call('HMGET', key, unpack(ids)) end
  local out = {}
  for i, id in ipairs(ids) do out[i] = whole[id] or false end
  return out
end

-- For raw_items: :items and :attrs read whole where that costs less (whole_hash), for `n` ids.
local function whole_items(n)
  return {items = whole_hash(K_ITEMS, n), attrs = whole_hash(K_ATTRS, n)}
end

-- The entries of `ids`, in order (false for an id the window does not hold), and the first of
-- them stored in a shape no script writes (JSON without attrs; nil if none). `wholes`: the hashes
-- read whole for a larger read that this one is a part of (whole_items), else worked out here.
local function raw_items(ids, wholes)
  local out, bad = {}, nil
  wholes = wholes or whole_items(#ids)
  for i = 1, #ids, 500 do
    local chunk = {unpack(ids, i, math.min(i + 499, #ids))}
    local jsons = hash_values(K_ITEMS, chunk, wholes.items)
    local attrs = hash_values(K_ATTRS, chunk, wholes.attrs)
    local pins = redis.call('SMISMEMBER', K_PINNED, unpack(chunk))
    for j, id in ipairs(chunk) do
      if jsons[j] and not attrs[j] then bad = bad or id end
      out[#out + 1] = (jsons[j] and attrs[j]) and {id, jsons[j], attrs[j], pins[j]} or false
    end
  end
  return out, bad
end

-- Whether `content` (decoded) is a string, or a list of objects with a string type (content
-- parts: the client checks the rest of their shape).
local function content_ok(content)
  if type(content) == 'string' then return true end
  if type(content) ~= 'table' or #content == 0 then return false end
  for k, part in pairs(content) do
    if type(k) ~= 'number' or type(part) ~= 'table' or type(part.type) ~= 'string' then return false end
  end
  return true
end

-- An item body (`json`, stored under :items field `id`) a call hands back after writing (pop, a
-- retried caller id), checked as the client will decode it: a JSON object of UTF-8 text whose
-- content is a string or content parts (``content_ok``) and whose time is one a client reads
-- (a JSON integer from 0 to MAX_TIME_US: cjson reads 1.0 as 1, so the text after STORED_HEAD is
-- checked too); corrupt() otherwise, before the call writes anything.
local function check_body(id, json)
  local doc = stored_object(K_ITEMS, id, json)
  if not content_ok(doc.content) or not is_utf8(json) then corrupt(K_ITEMS, id, 'not an item body') end
  local t = doc.added_at_us
  local digits = string.sub(json, 1, #STORED_HEAD) ~= STORED_HEAD or string.find(json, '^%d+,', #STORED_HEAD + 1)
  if type(t) ~= 'number' or t % 1 ~= 0 or t < 0 or t > MAX_TIME_US or not digits then
    corrupt(K_ITEMS, id, 'not a time')
  end
  return doc
end

-- Whether two decoded JSON values are equal (content parts compare by value).
local function same_value(a, b)
  if type(a) ~= 'table' or type(b) ~= 'table' then return a == b end
  for k, v in pairs(a) do
    if not same_value(v, b[k]) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end

-- The entry of one item (nil when the window does not hold it).
local function raw_item(id)
  return raw_items({id})[1] or nil
end

-- The time (server µs, as text) in an item's stored JSON, either layout.
local function stored_time(json)
  return string.match(lean_json(json) or '', '^' .. STORED_HEAD .. '(%d+),')
end

-- Parse one item from ARGV[b+1..b+ITEM_ARGS]: id or '', body JSON ('{"content":...}'), type, tokens, priority,
-- pinned, group or '', tool link ('C:<name>=<call id> ...' for a tool call, 'R:<call id>' for a result), the
-- letters a build reads (upper case; contextstore/core/facts.py owns them: kept as given, '' from a
-- turn's input enqueued by an older client, which makes builds read the window whole).
local function parse_item(b)
  local it = {
    id = ARGV[b + 1], body = ARGV[b + 2], type = ARGV[b + 3], tokens = tonumber(ARGV[b + 4]),
    priority = tonumber(ARGV[b + 5]), pinned = ARGV[b + 6] == '1', group = ARGV[b + 7] or '',
    flags = ARGV[b + 9] or '', calls = {},
  }
  local link = ARGV[b + 8] or ''
  if not RANK[it.type] or not is_int(it.tokens, 1, MAX_TOKENS) or not string.find(it.flags, '^%u*$')
      or not is_int(it.priority, 0, MAX_PRIORITY)
      or (string.sub(it.body, 1, 11) ~= '{"content":' and string.sub(it.body, 1, 10) ~= '{"blobs":[') then
    return nil
  end
  if string.sub(link, 1, 2) == 'C:' then
    for _, pair in ipairs(words(string.sub(link, 3))) do
      local name, call = string.match(pair, '^([^=]+)=(.+)$')
      if not name then return nil end
      it.calls[#it.calls + 1] = {id = call, name = name}
    end
  elseif string.sub(link, 1, 2) == 'R:' then
    it.answers = string.sub(link, 3)
  end
  it.tail = string.sub(it.body, 2)
  return it
end

local function group_members(group)
  return words(redis.call('HGET', K_GROUPS, group))
end

-- Count (d = 1) or uncount (d = -1) in :blobs the blobs stored JSONs (items or archived rows)
-- refer to: contextstore/core/blobs.py puts their shas first in an item's body, where no caller's
-- value can be. What a sweep of the prefix's blobs asks the window (plans/blobs.py).
local function count_blobs(jsons, d)
  for _, json in ipairs(jsons) do
    local list = type(json) == 'string' and (string.match(json, '^{"added_at_us":%d+,"blobs":%[([^%]]*)%],')
      or string.match(json, '^{"blobs":%[([^%]]*)%],'))  -- (an input waiting for a turn: a body alone)
    for sha in string.gmatch(list or '', '"(%x+)[^"]*"') do  -- a reference: the sha, then what it is
      if redis.call('HINCRBY', K_BLOBS, sha, d) <= 0 then redis.call('HDEL', K_BLOBS, sha) end
    end
  end
end

-- `cmd key` with the words of `args` (a flat list), at most 2000 of them a call: a restore of
-- 200,000 items makes a few hundred calls, not a million.
local function batched(cmd, key, args)
  for i = 1, #args, 2000 do
    redis.call(cmd, key, unpack(args, i, math.min(i + 1999, #args)))
  end
end

-- Write items into every structure (not the counters): their JSON, attrs, build order, arrival
-- order, pins, groups and tool calls. rows = {{it, json}, ...}, it = {id, seq, type, tokens,
-- priority, pinned, flags, group, calls}; they come last in arrival order, in this order, or just
-- before the id `before`.
local function store_items(rows, before)
  local items, attrs, order, fifo, pinned, calls, jsons, groups, members = {}, {}, {}, {}, {}, {}, {}, {}, {}
  local sizes, joined = {}, {}  -- joined: the groups a message joins
  for _, row in ipairs(rows) do
    local it, json = row[1], row[2]
    local n = #items
    items[n + 1], items[n + 2], attrs[n + 1], attrs[n + 2] = it.id, json, it.id, pack_attrs(it)
    order[n + 1], order[n + 2] = score(it.type, it.priority, it.seq), it.id
    local sized = size_score(it.type, it.tokens, it.seq)
    if sized then sizes[#sizes + 1], sizes[#sizes + 2] = sized, it.id end
    fifo[#fifo + 1], jsons[#jsons + 1] = it.id, json
    if it.pinned then pinned[#pinned + 1] = it.id end
    if it.group ~= '' then
      if not members[it.group] then
        groups[#groups + 1], members[it.group] = it.group, {redis.call('HGET', K_GROUPS, it.group) or nil}
      end
      table.insert(members[it.group], it.id)
      if sized then joined[it.group] = true end
    end
    for _, call in ipairs(it.calls or {}) do
      calls[#calls + 1], calls[#calls + 2] = call.id, it.group .. ' ' .. call.name
    end
  end
  batched('HSET', K_ITEMS, items)
  count_blobs(jsons, 1)
  batched('HSET', K_ATTRS, attrs)
  batched('ZADD', K_ORDER, order)
  batched('ZADD', K_SIZES, sizes)
  if before then
    for _, id in ipairs(fifo) do redis.call('LINSERT', K_FIFO, 'BEFORE', before, id) end
  else
    batched('RPUSH', K_FIFO, fifo)
  end
  batched('SADD', K_PINNED, pinned)
  local grouped = {}
  for _, g in ipairs(groups) do grouped[#grouped + 1], grouped[#grouped + 2] = g, table.concat(members[g], ' ') end
  batched('HSET', K_GROUPS, grouped)
  for g in pairs(joined) do  -- a group that holds two messages (F.MESSAGE_GROUPS: plans/facts_read.py)
    local n, ids = 0, {}
    for id in string.gmatch(table.concat(members[g], ' '), '%S+') do ids[#ids + 1] = id end
    for _, v in ipairs(redis.call('HMGET', K_ATTRS, unpack(ids))) do
      local a = parse_attrs(v)
      if a and SIZED[a.type] then n = n + 1 end
    end
    if n > 1 then meta_set(F.MESSAGE_GROUPS, 1) end
  end
  batched('HSET', K_CALLS, calls)
end

-- store_items of one item (an add's), written directly: store_items' tables and batches made an
-- add cost the shard 4-8% more instructions (docs/benchmarks.md).
local function store_item(it, json, before)
  redis.call('HSET', K_ITEMS, it.id, json)
  count_blobs({json}, 1)
  redis.call('HSET', K_ATTRS, it.id, pack_attrs(it))
  redis.call('ZADD', K_ORDER, score(it.type, it.priority, it.seq), it.id)
  local sized = size_score(it.type, it.tokens, it.seq)
  if sized then redis.call('ZADD', K_SIZES, sized, it.id) end
  if before then
    redis.call('LINSERT', K_FIFO, 'BEFORE', before, it.id)
  else
    redis.call('RPUSH', K_FIFO, it.id)
  end
  if it.pinned then redis.call('SADD', K_PINNED, it.id) end
  if it.group ~= '' then
    local v = redis.call('HGET', K_GROUPS, it.group)
    redis.call('HSET', K_GROUPS, it.group, v and (v .. ' ' .. it.id) or it.id)
    for id in string.gmatch(sized and v or '', '%S+') do  -- a message joins a group that holds one
      local a = parse_attrs(redis.call('HGET', K_ATTRS, id))
      if a and SIZED[a.type] then meta_set(F.MESSAGE_GROUPS, 1) break end
    end
  end
  for _, call in ipairs(it.calls or {}) do
    redis.call('HSET', K_CALLS, call.id, it.group .. ' ' .. call.name)
  end
end

-- Count a newly stored item in the window's counters, and announce it (item_added).
local function count_added(it)
  bump(F.TOKENS, it.tokens)
  bump(F.ITEMS, 1)
  bump(F.TOKENS_OF .. it.type, it.tokens)
  bump(F.ITEMS_OF .. it.type, 1)
  event('item_added', 'item_id', it.id, 'type', it.type, 'token_count', fmt(it.tokens),
    'total_tokens_after', fmt(meta_get(F.TOKENS)))
end

-- Store one new item: it = {id, seq, ts, tail, type, tokens, priority, pinned, group, calls},
-- last in arrival order or just before the id `before`. Returns its entry (raw_entry).
local function insert_item(it, before)
  local json = STORED_HEAD .. fmt(it.ts) .. ',' .. it.tail
  store_item(it, json, before)
  count_added(it)
  return raw_entry(it.id, json, pack_attrs(it), it.pinned)
end

-- The position in :fifo of `id` (seq s), searched in [lo, hi] by bisection on seq (:fifo is in
-- seq order; `gone` gives the seqs of removed ids, whose attrs are deleted), then a read of at
-- most 64 ids; nil when it is not there.
local function fifo_position(id, s, lo, hi, gone)
  while hi - lo > 64 do
    local mid = math.floor((lo + hi) / 2)
    local at = redis.call('LINDEX', K_FIFO, mid)
    local a = not gone[at] and parse_attrs(redis.call('HGET', K_ATTRS, at))
    local m = gone[at] or (a and a.seq)
    if not m then return nil end  -- a corrupt neighbour (verify() reports it): the caller looks everywhere
    if m == s then return mid end
    if m < s then lo = mid + 1 else hi = mid - 1 end
  end
  for j, x in ipairs(redis.call('LRANGE', K_FIFO, lo, hi)) do
    if x == id then return lo + j - 1 end
  end
  return nil
end

-- Drop removed ids from the :fifo list (gone: id -> seq): LREM for a few; for many, find each
-- by seq (in seq order, each between the last one found and the furthest its seq allows: no
-- more than one place per seq between them), blank it (LSET to '', which no id is) and drop
-- the blanks with one LREM, so the work grows with the ids removed, not with the list.
local function drop_from_fifo(ids, gone)
  if #ids <= 8 then
    for _, id in ipairs(ids) do redis.call('LREM', K_FIFO, 1, id) end
    return
  end
  local sorted = {}
  for i, id in ipairs(ids) do sorted[i] = id end
  table.sort(sorted, function(x, y) return gone[x] < gone[y] end)
  local len, lo, last, blanks = redis.call('LLEN', K_FIFO), 0, nil, 0
  for _, id in ipairs(sorted) do
    local s = gone[id]
    local hi = math.min(len - 1, last and (lo + s - last - 1) or (s - 1))
    local pos = fifo_position(id, s, lo, hi, gone)
    if pos then
      redis.call('LSET', K_FIFO, pos, '')
      lo, last, blanks = pos + 1, s, blanks + 1
    else
      redis.call('LREM', K_FIFO, 1, id)  -- not where its seq says (never expected): look everywhere
    end
  end
  if blanks > 0 then redis.call('LREM', K_FIFO, blanks, '') end
end

-- Drop removed ids from their groups' member lists (grouped: group -> true for every group
-- that lost a member), and the tool call ids of the removed calls.
local function drop_from_groups(grouped, gone, calls)
  for group in pairs(grouped) do
    local keep = {}
    for _, id in ipairs(group_members(group)) do
      if not gone[id] then keep[#keep + 1] = id end
    end
    hset_words(K_GROUPS, group, keep)
  end
  for i = 1, #calls, 500 do redis.call('HDEL', K_CALLS, unpack(calls, i, math.min(i + 499, #calls))) end
end

-- The tool call ids an assistant message's stored JSON names (metadata.tool_calls[].id);
-- corrupt() when its JSON or its calls are in a shape no script writes.
local function tool_call_ids(id)
  local doc = stored_object(K_ITEMS, id, redis.call('HGET', K_ITEMS, id))
  local meta, out = doc.metadata, {}
  local calls = type(meta) == 'table' and meta.tool_calls or nil
  if calls == nil then return out end
  if type(calls) ~= 'table' then corrupt(K_ITEMS, id, 'tool_calls is not a list') end
  for _, call in ipairs(calls) do
    if type(call) ~= 'table' or type(call.id) ~= 'string' then corrupt(K_ITEMS, id, 'a tool call without an id') end
    out[#out + 1] = call.id
  end
  return out
end

-- What removing items `ids` needs, read and checked before any write (corrupt() stops the
-- call while nothing is written): each one's attrs, and the tool call ids of the assistant
-- messages among them that are in a group. `own`: the items this call adds (id -> their plan
-- entry, with `calls`), which a later item of the same call may evict: they are not stored yet;
-- `cleared`: id -> the tokens of a tool result this call clears before it removes it. remove_many
-- takes it.
local function removal(ids, own, cleared)
  local attrs, calls = {}, {}
  own, cleared = own or {}, cleared or {}
  for i = 1, #ids, 500 do
    local chunk = {unpack(ids, i, math.min(i + 499, #ids))}
    local packed = redis.call('HMGET', K_ATTRS, unpack(chunk))
    for j, id in ipairs(chunk) do
      local a = own[id] or unpack_attrs(packed[j], id)
      if cleared[id] then a.tokens = cleared[id] end  -- as clear_content will have stored it
      attrs[#attrs + 1] = a
      if own[id] then
        for _, call in ipairs(a.calls or {}) do calls[#calls + 1] = call.id end
      elseif a.group ~= '' and a.type == 'assistant_message' then
        for _, call in ipairs(tool_call_ids(id)) do calls[#calls + 1] = call end
      end
    end
  end
  return {ids = ids, attrs = attrs, calls = calls}
end

-- Remove stored items (all must exist), keep the counters true, one item_removed event each.
-- `prepared`: their removal(), read before the calling script's first write (nil: read here,
-- which is only right in a script that has written nothing yet). Batched (500 ids per command)
-- so that removing a whole 100000-item window stays fast; the deletions come before the events,
-- so a removal also runs when Redis is at maxmemory. Returns the tokens freed.
local function remove_many(ids, reason, prepared)
  if #ids == 0 then return 0 end
  local r = prepared or removal(ids)
  local tokens, freed, gone, by_type, types, grouped = meta_get(F.TOKENS), 0, {}, {}, {}, {}
  for i = 1, #ids, 500 do
    local last = math.min(i + 499, #ids)
    local chunk = {unpack(ids, i, last)}
    local jsons = redis.call('EXISTS', K_BLOBS) == 1 and redis.call('HMGET', K_ITEMS, unpack(chunk)) or {}
    redis.call('HDEL', K_ITEMS, unpack(chunk))
    count_blobs(jsons, -1)
    redis.call('HDEL', K_ATTRS, unpack(chunk))
    redis.call('HDEL', K_VECTORS, unpack(chunk))
    redis.call('ZREM', K_ORDER, unpack(chunk))
    redis.call('ZREM', K_SIZES, unpack(chunk))
    redis.call('SREM', K_PINNED, unpack(chunk))
    for j, id in ipairs(chunk) do
      local a = r.attrs[i + j - 1]
      if a.group ~= '' then grouped[a.group] = true end
      tokens, freed, gone[id] = tokens - a.tokens, freed + a.tokens, a.seq
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
  drop_from_groups(grouped, gone, r.calls)
  return freed
end

-- The index of the closing quote of the JSON string that starts after position `from`.
local function string_end(json, from)
  local p = from
  while true do
    local q = string.find(json, '["\\]', p)
    if not q or string.sub(json, q, q) == '"' then return q end
    p = q + 2
  end
end

-- The index of the ']' or '}' that closes the JSON array or object opening at `from`.
local function value_end(json, from)
  local depth, p = 0, from
  while true do
    local q = string.find(json, '[%[%]{}"]', p)
    if not q then return nil end
    local c = string.sub(json, q, q)
    if c == '"' then
      q = string_end(json, q + 1)
      if not q then return nil end
    elseif c == '[' or c == '{' then
      depth = depth + 1
    else
      depth = depth - 1
      if depth == 0 then return q end
    end
    p = q + 1
  end
end

-- A tool result's stored JSON (either layout; `a` its attrs) in the lean layout with its content
-- replaced by the placeholder and metadata[CLEARED.key] = {tokens = its tokens before,
-- compaction = `compaction`: the number of the compaction that clears it}; nil if it is in no
-- known layout. metadata is the body's last field when it is set.
local function cleared_json(json, a, compaction)
  local lean = lean_json(json)
  if not lean then return nil end
  lean = string.gsub(lean, '^({"added_at_us":%d+,)"blobs":%[[^%]]*%],', '%1', 1)  -- the cleared content has none
  local s, e = string.find(lean, '^{"added_at_us":%d+,"content":"')
  local close = s and string_end(lean, e + 1)
  if not s then  -- content parts
    s, e = string.find(lean, '^{"added_at_us":%d+,"content":%[')
    close = s and value_end(lean, e)
  end
  if not close then return nil end
  local rest = string.sub(lean, close + 1)
  local ms, me = string.find(rest, ',"metadata":', 1, true)
  local mark, meta = '"' .. CLEARED.key .. '":{"tokens":' .. fmt(a.tokens) .. ',"compaction":' .. fmt(compaction) .. '}', nil
  if not ms then
    rest, meta = string.sub(rest, 1, -2), '{' .. mark .. '}}'
  else
    meta, rest = string.sub(rest, me + 1), string.sub(rest, 1, ms - 1)
    if string.sub(meta, 1, 4) == 'null' then
      meta = '{' .. mark .. '}' .. string.sub(meta, 5)
    elseif string.sub(meta, 1, 2) == '{}' then
      meta = '{' .. mark .. '}' .. string.sub(meta, 3)
    else
      meta = '{' .. mark .. ',' .. string.sub(meta, 2)
    end
  end
  return string.sub(lean, 1, e - 1) .. cjson.encode(CLEARED.placeholder) .. rest .. ',"metadata":' .. meta
end

-- Store a cleared tool result (`json` from cleared_json, `tokens` its new count); keeps the
-- item, its group and its place. Returns the tokens freed.
local function clear_content(id, json, tokens)
  local a = unpack_attrs(redis.call('HGET', K_ATTRS, id), id)
  local freed = a.tokens - tokens
  count_blobs({redis.call('HGET', K_ITEMS, id)}, -1)
  redis.call('HSET', K_ITEMS, id, json)
  redis.call('HDEL', K_VECTORS, id)
  new_epoch()
  a.tokens, a.flags = tokens, cleared_flags(a.flags)
  redis.call('HSET', K_ATTRS, id, pack_attrs(a))
  local sized = size_score(a.type, tokens, a.seq)
  if sized then redis.call('ZADD', K_SIZES, sized, id) end
  bump(F.TOKENS, -freed)
  bump(F.TOKENS_OF .. a.type, -freed)
  event('item_cleared', 'item_id', id, 'type', a.type, 'token_count', fmt(tokens),
    'tokens_freed', fmt(freed), 'total_tokens_after', fmt(meta_get(F.TOKENS)))
  return freed
end

-- add's request record keeps, per new item, its seq and time and where its arguments start;
-- a replay rebuilds the item's JSON from the replayed call's own arguments (the same request
-- carries the same arguments), so any item costs the log ~40 bytes. An item that existed
-- before the call (a safe retry of a caller id) is returned as it is stored now if it still
-- exists, else from the head it had then (up to its content) and the call's body.
-- An add's record stands while one of the items it stored is still in the window (the same id
-- and seq), or when they all left by the window's own rules (eviction, compaction, a summary:
-- no remove or pop came since the record, record.m); a replace's always does (running it
-- again would replace other items).
REPLAY_STANDS.add = function(record, rid)
  local rec = record.add
  if string.sub(rid, 1, 4) ~= 'add:' or (record.m or 0) == meta_get(F.REMOVED_BY_CALLER) then return true end
  local added = false
  for i = 6, #rec do
    local r = rec[i]
    if r[1] == '+' then
      added = true
      local id = parse_item(r[4]).id
      if id == '' then id = 'ctx-' .. r[2] end
      local packed = redis.call('HGET', K_ATTRS, id)
      if packed and unpack_attrs(packed, id).seq == tonumber(r[2]) then return true end
    end
  end
  return not added
end

-- A replayed '=' record's item (one that existed before the add): as it is now if it still
-- exists, else as it was then: {'=', time, body at, id, attrs, pin} (0.1 recorded
-- {'=', whole JSON head, body at, id, group}).
local function replayed_existing(r)
  local now = raw_item(r[4])
  if now then return now end
  local body = string.sub(ARGV[r[3]], 2)
  if r[6] ~= nil then return raw_entry(r[4], STORED_HEAD .. r[2] .. ',' .. body, r[5], r[6] == 1) end
  local it = cjson.decode(r[2] .. body)
  it.tokens, it.flags, it.group = it.token_count, '', r[5] or ''
  return raw_entry(r[4], STORED_HEAD .. fmt(it.added_at_us) .. ',' .. body, pack_attrs(it), it.pinned)
end

REPLAYS.add = function(rec)
  local out = {'ok', rec[1], rec[2], rec[3], rec[4], rec[5]}
  for i = 6, #rec do
    local r = rec[i]
    if r[1] == '=' then
      out[#out + 1] = replayed_existing(r)
    else
      local it = parse_item(r[4])
      it.seq = tonumber(r[2])
      if r[5] then it.group = r[5] end
      if it.id == '' then it.id = 'ctx-' .. r[2] end
      out[#out + 1] = raw_entry(it.id, STORED_HEAD .. r[3] .. ',' .. it.tail, pack_attrs(it), it.pinned)
    end
  end
  return out
end
