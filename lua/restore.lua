-- restore.lua: replace a window's items and config with a snapshot's, atomically.
-- needs: items archive turns
-- KEYS: the window keys (lib/core.lua). ARGV[1..N_CONFIG]: caller config (item_limit is taken from it
--   when the window does not exist yet).
-- ARGV[N_CONFIG + 1..2 * N_CONFIG]: the snapshot's config, in layout.Meta.CONFIG order (its
--   item_limit is ignored: a window keeps its own).
-- ARGV[2 * N_CONFIG + 1]: n; then the n items' rows, each a JSON array of 10 strings: id, stored
--   JSON, seq, token_count, priority, type, pinned, flags, group, tool link (as in add.lua), packed
--   into arguments that are each a JSON array of rows (up to wire.ROWS_AN_ARGUMENT rows or about
--   wire.BYTES_AN_ARGUMENT bytes: a script's arguments stay few at any size); then m, the
--   snapshot's archive entries, each: summary id, server ms it expires, k, and the rows of its k
--   items packed the same way, each a JSON array of 8 strings (id, stored JSON, seq, token_count,
--   priority, type, flags, group): the items the summary replaced, in arrival order; then, for a
--   fork (§19), 'fork', the window it is made
--   from and the item it is made at ('' for none): the window must not exist ({'!', 'EXISTS'}
--   otherwise, nothing written), it keeps its lineage in :meta (parent, fork_point) and its
--   event is 'forked' (parent, fork_point, items), not 'restored'.
-- Limits are not re-applied. The seq counter ends ahead of every restored seq (and never goes
-- back), so later ids cannot collide with restored ones. Items come in seq order. The window's
-- archive is replaced by the snapshot's entries whose expiry has not passed (by the server's
-- clock) and whose summary is among the restored items; the others are dropped and counted.
-- The inputs waiting for a turn stay, and so do the counts of the blobs they refer to (a turn
-- hash in a shape no script writes is left as it is: its next turn reports it).
-- It counts as a removal by hand: an add whose items it did not bring back runs again when
-- replayed (one whose items it restored replays).
-- Reply: number of items restored.
local A = 2 * N_CONFIG + 1

-- The n rows packed into the arguments from ARGV[at] on (each a JSON array of rows, each row a
-- JSON array of `width` strings) and the argument after them; nil when they are not so.
local function packed(at, n, width)
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

-- The items of the snapshot, the largest seq among them, and the argument after them; nil and
-- what is wrong when they are malformed.
local function parse_rows(n)
  local rows, after = packed(A + 1, n, 10)
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
  return items, max_seq, after
end

-- Empty the item keys, the archive (undo of an earlier summary is refused after a restore)
-- and the per-type counters (the window's other counters stay).
local function wipe()
  redis.call('UNLINK', K_ARCHIVE, unpack(item_keys()))
  local meta = redis.call('HGETALL', K_META)
  for i = 1, #meta, 2 do
    local f = meta[i]
    if string.sub(f, 1, #F.TOKENS_OF) == F.TOKENS_OF or string.sub(f, 1, #F.ITEMS_OF) == F.ITEMS_OF then
      redis.call('HDEL', K_META, f)
    end
  end
end

-- The archive entries after the items (which end at ARGV[at - 1]): {{id, expires, rows}, ...}
-- and where the arguments after them start, or nil when they are malformed.
local function parse_archive(at)
  local m, entries = tonumber(ARGV[at]), {}
  if not is_int(m, 0, MAX_ITEM_LIMIT) then return nil end
  at = at + 1
  for e = 1, m do
    local id, expires, k = ARGV[at], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
    if not id or id == '' or not is_int(expires, 0, 1e15) or not is_int(k, 1, MAX_ITEM_LIMIT) then return nil end
    local packed_rows, after = packed(at + 3, k, 8)
    if not packed_rows then return nil end
    local rows = {}
    for j = 1, k do
      local f = packed_rows[j]
      local a = {seq = tonumber(f[3]), tokens = tonumber(f[4]), priority = tonumber(f[5]), type = f[6], flags = f[7],
        group = f[8]}
      if f[1] == '' or not RANK[a.type] or not is_int(a.seq, 1, MAX_SEQ)
          or not is_int(a.tokens, 1, MAX_TOKENS) or not is_int(a.priority, 0, MAX_PRIORITY)
          or not string.find(a.flags, '^%a*$') or string.sub(f[2], 1, #STORED_HEAD) ~= STORED_HEAD then
        return nil
      end
      rows[j] = {f[2], pack_attrs(a), f[1]}
    end
    entries[e] = {id, expires, rows}
    at = after
  end
  return entries, at
end

-- Store the items (in a few calls per key) and count them per type; their tokens in all.
local function store(items)
  local rows, per_type, tokens = {}, {}, 0
  for i, it in ipairs(items) do
    rows[i], tokens = {it, it.json}, tokens + it.tokens
    local t = per_type[it.type] or {0, 0}
    t[1], t[2], per_type[it.type] = t[1] + it.tokens, t[2] + 1, t
  end
  store_items(rows)
  for kind, t in pairs(per_type) do
    redis.call('HSET', K_META, F.TOKENS_OF .. kind, fmt(t[1]), F.ITEMS_OF .. kind, fmt(t[2]))
  end
  return tokens
end

-- The window's config and counters (read_config); for a window whose :meta is corrupt, the
-- caller's config as for a new window, and the seq it held if that still reads: a restore
-- replaces the window whole, so it repairs one (its :meta is written anew).
local function current_config()
  local ok, cfg = pcall(read_config)
  if ok then return cfg, false end
  if not corruption_of(cfg) then error(cfg, 0) end
  META_KNOWN = {}
  cfg = config_of(ARGV, 0)
  if not valid_config(cfg) then return nil end
  local seq = redis.call('TYPE', K_META).ok == 'hash' and redis.call('HGET', K_META, F.SEQ)
  cfg.tokens, cfg.items, cfg.seq, cfg.new = 0, 0, tonumber(string.match(seq or '', '^%d+$')) or 0, true
  cfg.seq = math.min(cfg.seq, MAX_SEQ)
  CFG = cfg
  return cfg, true
end

local cfg, repairing = current_config()
if not cfg then return fail('BADARG', 'config') end
local c = config_of(ARGV, N_CONFIG)
c.item_limit = cfg.item_limit
if not valid_config(c) then return fail('BADARG', 'snapshot config') end
local n = tonumber(ARGV[A])
if not is_int(n, 0, c.item_limit) then return fail('BADARG', 'items') end
local items, max_seq, after = parse_rows(n)
if not items then return fail('BADARG', max_seq) end
local archive, tail = parse_archive(after)
if not archive then return fail('BADARG', 'archive') end
local fork = nil  -- {parent, fork point}
if tail == #ARGV - 2 and ARGV[tail] == 'fork' and ARGV[tail + 1] ~= '' then
  fork = {ARGV[tail + 1], ARGV[tail + 2]}
  if repairing or not cfg.new then return fail('EXISTS') end
elseif tail ~= #ARGV + 1 then
  return fail('BADARG', 'arity')
end

local replaced = cfg.items
local found, pending = pcall(pending_inputs)
local waiting = {}
for _, group in ipairs(found and pending.groups or {}) do waiting[#waiting + 1] = group[2] end
if repairing then redis.call('DEL', K_META) end
persist_config(cfg)
wipe()
count_blobs(waiting, 1)  -- wipe() took :blobs with the items
bump(F.REMOVED_BY_CALLER, 1)
new_epoch()
local tokens = store(items)
redis.call('HSET', K_META, F.TOKENS, fmt(tokens), F.ITEMS, fmt(n), F.SEQ, fmt(math.max(cfg.seq, max_seq)),
  unpack(config_pairs(c)))
local restored_ids, kept, expired = {}, 0, 0
for _, it in ipairs(items) do restored_ids[it.id] = true end
for _, entry in ipairs(archive) do
  if entry[2] <= now_ms() or not restored_ids[entry[1]] then
    expired = expired + 1
  else
    archive_set(entry[1], entry[3], entry[2])
    kept = kept + 1
  end
end
CFG = c
CFG.new = false
META_KNOWN[F.TOKENS] = tokens
if fork then
  redis.call('HSET', K_META, F.PARENT, fork[1], F.FORK_POINT, fork[2])
  event('forked', 'parent', fork[1], 'fork_point', fork[2], 'items', fmt(n))
else
  event('restored', 'items', fmt(n), 'items_replaced', fmt(replaced), 'total_tokens_after', fmt(tokens),
    'archived', fmt(kept), 'archive_dropped', fmt(expired))
end
rearm_ttl(c, true)
return n
