-- restore.lua: replace a window's items and config with a snapshot's, atomically.
-- needs: rows archive turns
-- KEYS: the window keys (lib/core.lua); then, when earlier calls staged items (stage.lua), the
--   staged keys: meta, items, order, fifo, pinned, attrs, groups, calls, blobs of the staging.
-- ARGV[1..N_CONFIG]: caller config (item_limit is taken from it when the window does not exist yet).
-- ARGV[N_CONFIG + 1..2 * N_CONFIG]: the snapshot's config, in layout.Meta.CONFIG order (its
--   item_limit is ignored: a window keeps its own).
-- ARGV[2 * N_CONFIG + 1]: how many items stage.lua staged (0: none; those come first, the
--   staged keys are moved into the window's); ARGV[2 * N_CONFIG + 2]: n; then the n items' rows
--   (lib/rows.lua), each a JSON array of 10 strings: id, stored
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

-- The :meta fields a restore keeps that reading the config does not check: the counters of
-- layout.Meta.COUNTERS less those stored_config reads, and the usage ratios.
local KEPT_UNCHECKED = {[F.COMPACTIONS] = true, [F.FREED] = true, [F.CREATED_MS] = true, [F.CREATED_US] = true,
  [F.SUMMARIES] = true, [F.USED_INPUT] = true, [F.USED_OUTPUT] = true, [F.USED_CACHE_READ] = true,
  [F.USED_CACHE_WRITE] = true, [F.USAGE_RECORDS] = true, [F.RATIOS] = true}

-- Whether a kept :meta value holds what a script writes (layout.meta_problems' rules).
local function readable(f, v)
  if f ~= F.RATIOS then return string.find(v, '^%d+$') ~= nil and #v <= 19 end
  for r in string.gmatch(v, '[^ ]+') do
    local n = tonumber(r)
    if not (n and n >= USAGE.calibration_min and n <= USAGE.calibration_max) then return false end
  end
  return true
end

-- Empty the item keys, the archive (undo of an earlier summary is refused after a restore)
-- and the per-type counters. The window's other counters stay, less those that hold what no
-- script writes (verify() names them): a restore repairs a window whole.
local function wipe()
  redis.call('UNLINK', K_ARCHIVE, unpack(item_keys()))
  local meta = redis.call('HGETALL', K_META)
  for i = 1, #meta, 2 do
    local f = meta[i]
    if string.sub(f, 1, #F.TOKENS_OF) == F.TOKENS_OF or string.sub(f, 1, #F.ITEMS_OF) == F.ITEMS_OF
        or f == F.MESSAGE_GROUPS or (KEPT_UNCHECKED[f] and not readable(f, meta[i + 1])) then
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
    local packed_rows, after = unpacked_rows(at + 3, k, 8)
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

-- What stage.lua staged (KEYS[18..]): its counters, when it holds `staged` items whose seqs all
-- come before `first_seq`; nil otherwise (expired, or another restore's).
local function staged_counts(staged, first_seq)
  if staged == 0 then return {} end
  if #KEYS ~= 17 + 10 then return nil end
  local counts, stored = {}, redis.call('HGETALL', KEYS[18])
  for i = 1, #stored, 2 do counts[stored[i]] = stored_int(KEYS[18], stored[i], stored[i + 1], 0, 1e15) end
  if counts[F.ITEMS] ~= staged or (first_seq and first_seq <= (counts[F.SEQ] or 0)) then return nil end
  return counts
end

-- Move the staged items' keys into the window's (emptied by wipe()).
local function move_staged()
  for i, k in ipairs({K_ITEMS, K_ORDER, K_FIFO, K_PINNED, K_ATTRS, K_GROUPS, K_CALLS, K_BLOBS, K_SIZES}) do
    if redis.call('EXISTS', KEYS[18 + i]) == 1 then redis.call('RENAME', KEYS[18 + i], k) end
  end
  redis.call('UNLINK', KEYS[18])
end

local cfg, repairing = current_config()
if not cfg then return fail('BADARG', 'config') end
local c = config_of(ARGV, N_CONFIG)
c.item_limit = cfg.item_limit
if not valid_config(c) then return fail('BADARG', 'snapshot config') end
local staged, n = tonumber(ARGV[A]), tonumber(ARGV[A + 1])
if not is_int(staged, 0, c.item_limit) or not is_int(n, 0, c.item_limit - staged) then return fail('BADARG', 'items') end
local items, max_seq, after = restored_rows(A + 2, n, staged > 0 and KEYS[19] or nil)
if not items then return fail('BADARG', max_seq) end
local counts = staged_counts(staged, items[1] and items[1].seq)
if not counts then return fail('BADARG', 'staged') end
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
if staged > 0 then move_staged() end
count_blobs(waiting, 1)  -- wipe() took :blobs with the items
bump(F.REMOVED_BY_CALLER, 1)
new_epoch()
max_seq = math.max(cfg.seq, max_seq, counts[F.SEQ] or 0)
counts[F.SEQ] = nil
store_restored(items, counts)
local total, tokens = n + staged, counts[F.TOKENS] or 0
local fields = {F.TOKENS, fmt(tokens), F.ITEMS, fmt(total), F.SEQ, fmt(max_seq), unpack(config_pairs(c))}
for field, value in pairs(counts) do
  if field ~= F.TOKENS and field ~= F.ITEMS then fields[#fields + 1], fields[#fields + 2] = field, fmt(value) end
end
redis.call('HSET', K_META, unpack(fields))
local kept, expired = 0, 0
for _, entry in ipairs(archive) do
  if entry[2] <= now_ms() or redis.call('HEXISTS', K_ITEMS, entry[1]) == 0 then
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
  event('forked', 'parent', fork[1], 'fork_point', fork[2], 'items', fmt(total))
else
  event('restored', 'items', fmt(total), 'items_replaced', fmt(replaced), 'total_tokens_after', fmt(tokens),
    'archived', fmt(kept), 'archive_dropped', fmt(expired))
end
rearm_ttl(c, true)
return total
