-- lib/meta.lua: the window's config and counters, in the :meta hash; its TTL.
-- needs: events
--
-- Counters are changed in memory (bump / meta_set) and written by flush_meta, which
-- run_request calls after every script: one HMGET + one HSET however many items a call adds or
-- removes, instead of an HINCRBY per counter per item.

local META_KNOWN, META_DELTA, META_DIRTY = {}, {}, {}

local function mark_dirty(f)
  if META_DELTA[f] == nil then
    META_DELTA[f] = 0
    META_DIRTY[#META_DIRTY + 1] = f
  end
end

local function meta_get(f)
  if META_KNOWN[f] == nil then META_KNOWN[f] = tonumber(redis.call('HGET', K_META, f)) or 0 end
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
  local unknown = {}
  for _, f in ipairs(META_DIRTY) do
    if META_KNOWN[f] == nil then unknown[#unknown + 1] = f end
  end
  if #unknown > 0 then
    local v = redis.call('HMGET', K_META, unpack(unknown))
    for i, f in ipairs(unknown) do META_KNOWN[f] = tonumber(v[i]) or 0 end
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

-- The one check of a config's values (limits generated from contextstore/layout.py).
local function valid_config(c)
  return is_int(c.max_tokens, 0, MAX_TOKENS) and is_int(c.item_limit, 1, MAX_ITEM_LIMIT)
    and is_int(c.max_items, 1, c.item_limit) and c.threshold ~= nil and c.threshold > 0
    and c.threshold <= 100 and STRATEGIES[c.strategy] ~= nil and is_int(c.ttl, 0, MAX_TTL_SECONDS)
    and is_int(c.keep_recent, 0, MAX_ITEM_LIMIT) and is_int(c.clear_at_least, 0, MAX_TOKENS)
    and type(c.clear_exclude) == 'string' and c.warn_percent ~= nil and c.warn_percent > 0
    and c.warn_percent <= 100 and is_int(c.events_maxlen, 1, MAX_EVENTS)
end

-- A config from its values in layout.Meta.CONFIG order (v[1..11]), the options added later
-- defaulting for a window made before they existed.
local function config_of(v)
  local c = {
    max_tokens = tonumber(v[1]), max_items = tonumber(v[2]), item_limit = tonumber(v[3]),
    threshold = tonumber(v[4]), strategy = v[5], ttl = tonumber(v[6]),
    keep_recent = tonumber(v[7]) or 0, clear_at_least = tonumber(v[8]) or 0, clear_exclude = v[9] or '',
    warn_percent = tonumber(v[10]) or DEFAULT_WARN_PERCENT, events_maxlen = tonumber(v[11]) or STREAM_MAXLEN,
  }
  c.excluded = {}
  for _, name in ipairs(words(c.clear_exclude)) do c.excluded[name] = true end
  return c
end

-- The window's config and counters; for a missing window, the caller's config (new = true).
-- Returns nil when the window is missing and ARGV[1..N_CONFIG] is not a valid config.
local function read_config()
  local m = redis.call('HMGET', K_META, F.MAX_TOKENS, F.MAX_ITEMS, F.ITEM_LIMIT, F.THRESHOLD,
    F.STRATEGY, F.TTL, F.KEEP_RECENT, F.CLEAR_AT_LEAST, F.CLEAR_EXCLUDE, F.WARN_PERCENT, F.EVENTS_MAXLEN,
    F.TOKENS, F.ITEMS, F.SEQ)
  if m[2] then
    local c = config_of(m)
    c.tokens, c.items, c.seq, c.new = tonumber(m[12]) or 0, tonumber(m[13]) or 0, tonumber(m[14]) or 0, false
    META_KNOWN[F.TOKENS], META_KNOWN[F.ITEMS], META_KNOWN[F.SEQ] = c.tokens, c.items, c.seq
    CFG = c
    return c
  end
  local c = config_of(ARGV)
  c.tokens, c.items, c.seq, c.new = 0, 0, 0, true
  if not valid_config(c) then return nil end
  CFG = c
  return c
end

-- Write phase: give a new window its meta hash (a new lifetime: ids start again).
local function persist_config(c)
  if not c.new then return end
  WROTE = true
  redis.call('DEL', unpack(ITEM_KEYS))
  redis.call('HSET', K_META, F.MAX_TOKENS, fmt(c.max_tokens), F.MAX_ITEMS, fmt(c.max_items),
    F.ITEM_LIMIT, fmt(c.item_limit), F.THRESHOLD, tostring(c.threshold), F.STRATEGY, c.strategy,
    F.TTL, fmt(c.ttl), F.SEQ, '0', F.TOKENS, '0', F.ITEMS, '0', F.COMPACTIONS, '0',
    F.FREED, '0', F.CREATED_MS, fmt(math.floor(now_us() / 1000)), F.KEEP_RECENT, fmt(c.keep_recent),
    F.CLEAR_AT_LEAST, fmt(c.clear_at_least), F.CLEAR_EXCLUDE, c.clear_exclude,
    F.WARN_PERCENT, tostring(c.warn_percent), F.EVENTS_MAXLEN, fmt(c.events_maxlen), F.WARNED, '0')
  META_KNOWN = {[F.SEQ] = 0, [F.TOKENS] = 0, [F.ITEMS] = 0, [F.COMPACTIONS] = 0, [F.FREED] = 0, [F.WARNED] = 0}
  c.new = false
end

-- Re-arm the expiry of every key of the window (mutations only; reads never call this), or
-- make them persistent when the window has no TTL and `persist` is set (a config change).
local function rearm_ttl(c, persist)
  if c.ttl and c.ttl > 0 then
    for _, k in ipairs(ALL_KEYS) do redis.call('EXPIRE', k, c.ttl) end
  elseif persist then
    for _, k in ipairs(ALL_KEYS) do redis.call('PERSIST', k) end
  end
end

-- A usage_warning event when usage has just crossed warn_percent upwards (once per crossing:
-- the flag resets when usage falls below it again).
local function check_usage()
  local c = CFG
  if not c or c.new or not c.max_tokens or c.max_tokens == 0 then return end
  local tokens = meta_get(F.TOKENS)
  local over, warned = tokens * 100 >= c.warn_percent * c.max_tokens, meta_get(F.WARNED) == 1
  if over and not warned then
    event('usage_warning', 'usage_percent', pct(tokens, c.max_tokens), 'warn_percent', tostring(c.warn_percent),
      'total_tokens', fmt(tokens))
    meta_set(F.WARNED, 1)
  elseif warned and not over then
    meta_set(F.WARNED, 0)
  end
end
