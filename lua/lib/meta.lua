-- lib/meta.lua: the window's config and counters, in the :meta hash; its TTL.
-- needs: events
--
-- Counters are changed in memory (bump / meta_set) and written by flush_meta, which
-- run_request calls after every script: one HMGET + one HSET however many items a call adds or
-- removes, instead of an HINCRBY per counter per item.

local function mark_dirty(f)
  if META_DELTA[f] == nil then
    META_DELTA[f] = 0
    META_DIRTY[#META_DIRTY + 1] = f
  end
end

-- A counter of :meta (0 when missing; corrupt() when it is not an integer).
local function meta_get(f)
  if META_KNOWN[f] == nil then META_KNOWN[f] = stored_int(K_META, f, redis.call('HGET', K_META, f), 0, 2 ^ 53) end
  return META_KNOWN[f] + (META_DELTA[f] or 0)
end

local function bump(f, d)
  mark_dirty(f)
  META_DELTA[f] = META_DELTA[f] + d
end

local function meta_set(f, v)
  mark_dirty(f)
  META_KNOWN[f], META_DELTA[f] = v, 0
end

local function flush_meta()
  if #META_DIRTY == 0 then return end
  local unknown = nil
  for _, f in ipairs(META_DIRTY) do
    if META_KNOWN[f] == nil then
      unknown = unknown or {}
      unknown[#unknown + 1] = f
    end
  end
  if unknown then  -- counters no check read (per type, compactions): after the writes, so one that is
    local v = redis.call('HMGET', K_META, unpack(unknown))  -- not an integer is written anew (verify() tells)
    for i, f in ipairs(unknown) do
      local n = tonumber(v[i])
      META_KNOWN[f] = is_int(n, -2 ^ 53, 2 ^ 53) and n or 0
    end
  end
  local args = {}
  for _, f in ipairs(META_DIRTY) do
    META_KNOWN[f] = META_KNOWN[f] + META_DELTA[f]
    args[#args + 1] = f
    args[#args + 1] = fmt(META_KNOWN[f])
  end
  redis.call('HSET', K_META, unpack(args))
  META_DELTA, META_DIRTY = {}, {}
end

-- The one check of a config's values (limits generated from contextstore/core/layout.py): the
-- first field that is not valid, or nil. (Every mutation checks its window's stored config: written
-- out, with no call per field; `v % 1 == 0` is false for NaN and the infinities.)
local function bad_config(c)
  local v = c.max_tokens
  if not (v and v % 1 == 0 and v >= 0 and v <= MAX_TOKENS) then return F.MAX_TOKENS end
  local limit = c.item_limit
  if not (limit and limit % 1 == 0 and limit >= 1 and limit <= MAX_ITEM_LIMIT) then return F.ITEM_LIMIT end
  v = c.max_items
  if not (v and v % 1 == 0 and v >= 1 and v <= limit) then return F.MAX_ITEMS end
  v = c.threshold
  if not (v and v > 0 and v <= 100) then return F.THRESHOLD end
  if STRATEGIES[c.strategy] == nil then return F.STRATEGY end
  v = c.ttl
  if not (v and v % 1 == 0 and v >= 0 and v <= MAX_TTL_SECONDS) then return F.TTL end
  v = c.keep_recent
  if not (v and v % 1 == 0 and v >= 0 and v <= MAX_ITEM_LIMIT) then return F.KEEP_RECENT end
  v = c.clear_at_least
  if not (v and v % 1 == 0 and v >= 0 and v <= MAX_TOKENS) then return F.CLEAR_AT_LEAST end
  if type(c.clear_exclude) ~= 'string' then return F.CLEAR_EXCLUDE end
  v = c.warn_percent
  if not (v and v > 0 and v <= 100) then return F.WARN_PERCENT end
  v = c.events_maxlen
  if not (v and v % 1 == 0 and v >= 1 and v <= MAX_EVENTS) then return F.EVENTS_MAXLEN end
  v = c.archive_ttl
  if not (v and v % 1 == 0 and v >= 1 and v <= MAX_TTL_SECONDS) then return F.ARCHIVE_TTL end
  v = c.target
  if not (v and v >= 0 and v <= 100) then return F.TARGET end
  return nil
end

local function valid_config(c)
  return bad_config(c) == nil
end

-- A config from its values in layout.Meta.CONFIG order (v[at + 1..at + N_CONFIG]); a field a
-- window made by an older version lacks takes its default. The table's keys are the :meta field
-- names. (Read on every mutation: no copy of v, no table for an empty clear_exclude.)
local function config_of(v, at)
  local c, excluded = {}, {}
  for i = 1, N_CONFIG do
    local f = CONFIG_FIELDS[i]
    local raw = v[at + i] or CONFIG_DEFAULTS[f]
    if CONFIG_TEXT[f] then c[f] = raw else c[f] = tonumber(raw) end
  end
  if type(c.clear_exclude) == 'string' and c.clear_exclude ~= '' then
    for name in string.gmatch(c.clear_exclude, '%S+') do excluded[name] = true end
  end
  c.excluded = excluded
  return c
end

-- A config's values as the scripts answer and store them, in layout.Meta.CONFIG order.
local function config_list(c)
  local out = {}
  for i, f in ipairs(CONFIG_FIELDS) do
    local v = c[f]
    if CONFIG_TEXT[f] then out[i] = v elseif CONFIG_FLOAT[f] then out[i] = tostring(v) else out[i] = fmt(v) end
  end
  return out
end

-- A config as field/value pairs for HSET (item_limit, which never changes, only for a new window).
local function config_pairs(c, with_item_limit)
  local out = {}
  for i, v in ipairs(config_list(c)) do
    local f = CONFIG_FIELDS[i]
    if f ~= F.ITEM_LIMIT or with_item_limit then
      out[#out + 1], out[#out + 2] = f, v
    end
  end
  return out
end

-- The counters read_config reads with the config, in its HMGET's order, and their bounds.
local COUNTER_FIELDS = {F.TOKENS, F.ITEMS, F.SEQ, F.EPOCH, F.WARNED, F.REMOVED_BY_CALLER}
local COUNTER_MAX = {2 ^ 53, 2 ^ 53, MAX_SEQ, 2 ^ 53, 1, 2 ^ 53}

-- The window's config and counters; nil when the window does not exist (what the scripts that
-- never make a window read: they take no caller config).
local function stored_config()
  local m = redis.call('HMGET', K_META, F.TOKENS, F.ITEMS, F.SEQ, F.EPOCH, F.WARNED, F.REMOVED_BY_CALLER,
    F.CALIBRATION, unpack(CONFIG_FIELDS))
  if m[9] then
    local c = config_of(m, 7)
    local bad = bad_config(c)
    if bad then corrupt(K_META, bad, 'not a valid config value') end
    c.calibration = tonumber(m[7] or 1)
    if not (c.calibration and c.calibration >= USAGE.calibration_min and c.calibration <= USAGE.calibration_max) then
      corrupt(K_META, F.CALIBRATION, 'not a ratio from ' .. USAGE.calibration_min .. ' to ' .. USAGE.calibration_max)
    end
    -- the counters, as counts (m[1..6]: COUNTER_FIELDS; a missing one is 0): every mutation reads
    -- them, so checked here with no call per field
    for i = 1, 6 do
      local n = tonumber(m[i] or 0)
      if not (n and n % 1 == 0 and n >= 0 and n <= COUNTER_MAX[i]) then corrupt(K_META, COUNTER_FIELDS[i], 'not a count') end
      m[i] = n
    end
    c.tokens, c.items, c.seq, c.new = m[1], m[2], m[3], false
    META_KNOWN[F.TOKENS], META_KNOWN[F.ITEMS], META_KNOWN[F.SEQ] = c.tokens, c.items, c.seq
    -- epoch 0: a window written before epochs (set on its next write); removed_by_caller: an
    -- add's reply record keeps it
    META_KNOWN[F.EPOCH], META_KNOWN[F.WARNED], META_KNOWN[F.REMOVED_BY_CALLER] = m[4], m[5], m[6]
    CFG = c
    return c
  end
  return nil
end

-- The window's config and counters; for a missing window, the caller's config (ARGV[1..N_CONFIG],
-- new = true), nil when that is not a valid config.
local function read_config()
  local c = stored_config()
  if c then return c end
  c = config_of(ARGV, 0)
  c.tokens, c.items, c.seq, c.new, c.calibration = 0, 0, 0, true, 1
  if not valid_config(c) then return nil end
  CFG = c
  return c
end

-- The window's token limit in estimated tokens (0: none): max_tokens as the provider counts them,
-- through the calibration its reported usage made (usage.lua; 1 until then). Budgets, thresholds
-- and usage percents all apply to it. (A config a caller passes, as restore's, has none: 1.)
local function token_limit(c)
  local calibration = c.calibration or 1
  if c.max_tokens == 0 or calibration == 1 then return c.max_tokens end
  return math.max(1, math.floor(c.max_tokens / calibration))
end

-- Write phase: give a new window its meta hash (a new lifetime: ids start again).
local function persist_config(c)
  if not c.new then return end
  WROTE = true
  redis.call('UNLINK', K_ARCHIVE, unpack(item_keys()))
  local fields = config_pairs(c, true)
  for _, f in ipairs({F.SEQ, F.TOKENS, F.ITEMS, F.COMPACTIONS, F.FREED, F.WARNED}) do
    fields[#fields + 1], fields[#fields + 2] = f, '0'
  end
  fields[#fields + 1], fields[#fields + 2] = F.CREATED_MS, fmt(math.floor(now_us() / 1000))
  fields[#fields + 1], fields[#fields + 2] = F.EPOCH, fmt(now_us())
  fields[#fields + 1], fields[#fields + 2] = F.CREATED_US, fmt(now_us())
  redis.call('HSET', K_META, unpack(fields))
  META_KNOWN = {[F.SEQ] = 0, [F.TOKENS] = 0, [F.ITEMS] = 0, [F.COMPACTIONS] = 0, [F.FREED] = 0, [F.WARNED] = 0,
    [F.EPOCH] = now_us(), [F.CREATED_US] = now_us()}
  c.new = false
end

-- A new epoch (layout.Meta.EPOCH): a stored item changed in place, or items came back with seqs
-- already handed out, so what clients cached of the window's items is stale.
local function new_epoch()
  meta_set(F.EPOCH, math.max(now_us(), meta_get(F.EPOCH) + 1))
end

-- Re-arm the expiry of every key of the window (mutations only; reads never call this), or
-- make them persistent when the window has no TTL and `persist` is set (a config change).
local function rearm_ttl(c, persist)
  if c.ttl and c.ttl > 0 then
    for _, k in ipairs(all_keys()) do redis.call('EXPIRE', k, c.ttl) end
  elseif persist then
    for _, k in ipairs(all_keys()) do redis.call('PERSIST', k) end
  end
end

-- A usage_warning event when usage has just crossed warn_percent upwards (once per crossing:
-- the flag resets when usage falls below it again).
local function check_usage()
  local c = CFG
  if not c or c.new or not c.max_tokens or c.max_tokens == 0 then return end
  local tokens, limit = meta_get(F.TOKENS), token_limit(c)
  local over, warned = tokens * 100 >= c.warn_percent * limit, meta_get(F.WARNED) == 1
  if over and not warned then
    event('usage_warning', 'usage_percent', pct(tokens, limit), 'warn_percent', tostring(c.warn_percent),
      'total_tokens', fmt(tokens))
    meta_set(F.WARNED, 1)
  elseif warned and not over then
    meta_set(F.WARNED, 0)
  end
end

-- The window's version (contextstore/layout.window_version makes the same from the meta hash):
-- the VERSION_FIELDS counters joined by '.'; what `expect_version` is checked against.
local function window_version()
  local parts = {}
  for i, f in ipairs(VERSION_FIELDS) do parts[i] = string.format('%d', meta_get(f)) end
  return table.concat(parts, '.')
end
