-- lib/rows.lua: the rows of a restore's items, as restore.lua and stage.lua take them.
-- needs: items

-- The n rows packed into the arguments from ARGV[at] on (each a JSON array of rows, each row a
-- JSON array of `width` strings) and the argument after them; nil when they are not so.
local function unpacked_rows(at, n, width)
  local rows, count = {}, 0
  while count < n do
    local ok, chunk = pcall(cjson.decode, ARGV[at] or '')
    if not ok or type(chunk) ~= 'table' or #chunk == 0 or count + #chunk > n then return nil end
    for _, row in ipairs(chunk) do
      if type(row) ~= 'table' or #row ~= width then return nil end
      for k = 1, width do
        if type(row[k]) ~= 'string' then return nil end
      end
      count = count + 1
      rows[count] = row
    end
    at = at + 1
  end
  return rows, at
end

-- The n items packed from ARGV[at] on, each row 10 strings: id, stored JSON, seq, token_count,
-- priority, type, pinned, flags, group, tool link (as in add.lua); the largest seq among them
-- and the argument after them. nil and what is wrong when they are malformed, or an id repeats
-- among them or is in `held` (a hash of ids already staged, or nil: HMGETs of a thousand).
local function restored_rows(at, n, held)
  local rows, after = unpacked_rows(at, n, 10)
  if not rows then return nil, 'items' end
  local items, seen, max_seq = {}, {}, 0
  for i = 1, n do
    local f = rows[i]
    local it = {id = f[1], json = f[2], seq = tonumber(f[3]), tokens = tonumber(f[4]), priority = tonumber(f[5]),
      type = f[6], pinned = f[7] == '1', flags = f[8], group = f[9], calls = {}}
    local link = f[10]
    if it.id == '' or seen[it.id] or not RANK[it.type] or not is_int(it.seq, 1, MAX_SEQ)
        or not is_int(it.tokens, 1, MAX_TOKENS) or not is_int(it.priority, 0, MAX_PRIORITY)
        or not string.find(it.flags or '', '^%a*$') or string.sub(it.json, 1, #STORED_HEAD) ~= STORED_HEAD then
      return nil, 'item ' .. i
    end
    if string.sub(link, 1, 2) == 'C:' then
      for _, pair in ipairs(words(string.sub(link, 3))) do
        local name, call = string.match(pair, '^([^=]+)=(.+)$')
        it.calls[#it.calls + 1] = {id = call, name = name}
      end
    end
    seen[it.id] = true
    if it.seq > max_seq then max_seq = it.seq end
    items[i] = it
  end
  for from = 1, held and n or 0, 1000 do
    local ids = {}
    for i = from, math.min(n, from + 999) do ids[#ids + 1] = items[i].id end
    for k, found in ipairs(redis.call('HMGET', held, unpack(ids))) do
      if found then return nil, 'item ' .. (from + k - 1) end
    end
  end
  return items, max_seq, after
end

-- Store restored items (in a few calls per key) and count them, in all and per type, into the
-- counters `counts` (field -> number: F.TOKENS, F.ITEMS, F.TOKENS_OF .. type, F.ITEMS_OF ..
-- type), which it returns.
local function store_restored(items, counts)
  local rows = {}
  for i, it in ipairs(items) do
    rows[i] = {it, it.json}
    local tokens_of, items_of = F.TOKENS_OF .. it.type, F.ITEMS_OF .. it.type
    counts[F.TOKENS], counts[F.ITEMS] = (counts[F.TOKENS] or 0) + it.tokens, (counts[F.ITEMS] or 0) + 1
    counts[tokens_of], counts[items_of] = (counts[tokens_of] or 0) + it.tokens, (counts[items_of] or 0) + 1
  end
  store_items(rows)
  return counts
end
