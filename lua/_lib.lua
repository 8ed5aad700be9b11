-- _lib.lua: helpers shared by every contextstore script. contextstore/scripts.py prepends this
-- file to each script and wraps the script's body in `local function main() ... end`, so every
-- script is one self-contained EVAL body that ends in `return run_request(main)`.
--
-- KEYS (the same nine for every script, all under the hash tag {<window_id>}):
--   KEYS[1] meta     hash: config + counters (tokens, items, seq, per-type tokens:/items:)
--   KEYS[2] items    hash: id -> item JSON
--   KEYS[3] order    zset: id scored in build order (type rank, priority desc, seq asc)
--   KEYS[4] fifo     list: ids in arrival order
--   KEYS[5] pinned   set:  ids of pinned items
--   KEYS[6] attrs    hash: id -> "seq|tokens|priority|type" (what limits need, without the JSON)
--   KEYS[7] events   stream: one entry per mutation
--   KEYS[8] requests list: "<server time ms>|<request id>", oldest first (what to expire)
--   KEYS[9] replies  hash: request id -> "<fingerprint>\n<reply record JSON>"
-- ARGV[1] of every script: the request, "<request id>|<fingerprint>", or "" (no request id).
--   It is removed from ARGV before the script runs, so a script's own arguments start at ARGV[1].
-- ARGV[1..6] of every mutating script (after that removal): the caller's config, used only when
--   the window does not exist yet: max_tokens (0 = none), max_items, item_limit, threshold,
--   strategy, ttl (0 = none)
-- Error replies are tables {'!', CODE, detail...}; Python turns them into typed exceptions.
-- Every script checks everything before its first write: Redis does not roll scripts back.
--
-- Exactly-once: a script that wrote something records its reply under its request id; the same
-- request id again (a retry whose first reply was lost) returns that reply and writes nothing.
-- The log keeps the last REQUEST_MAX requests younger than REQUEST_TTL_MS; both keys expire
-- when the window is idle that long. A request that wrote nothing (an error, a no-op) is not
-- recorded: running it again is as safe as running it once.

redis.replicate_commands()

local K_META, K_ITEMS, K_ORDER, K_FIFO, K_PINNED, K_ATTRS, K_EVENTS, K_REQUESTS, K_REPLIES =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local REQUEST = table.remove(ARGV, 1) or ''
local REQUEST_TTL_MS, REQUEST_MAX = 900000, 2000
local WROTE = false  -- set by every write helper; a request is recorded only if it wrote
local ITEM_KEYS = {K_ITEMS, K_ORDER, K_FIFO, K_PINNED, K_ATTRS}
local ALL_KEYS = {K_META, K_ITEMS, K_ORDER, K_FIFO, K_PINNED, K_ATTRS, K_EVENTS}
local STREAM_MAXLEN = '10000'

local RANK = {
  system_prompt = 0, instruction = 1, retrieved_document = 2, working_memory = 3,
  tool_result = 4, user_message = 5, assistant_message = 6, code = 2, file = 2, text = 2,
  error = 4, repl_history = 4, custom = 99, other = 99,
}
local STRATEGIES = {remove_oldest = true, remove_low_priority = true, summarize = true, selective = true}
local SERVER_SIDE = {remove_oldest = true, remove_low_priority = true}

local function fail(code, ...)
  return {'!', code, ...}
end

-- integers of any size we use, printed exactly (tostring would use %.14g)
local function fmt(n)
  return string.format('%.0f', n)
end

local function pct(tokens, max_tokens)
  if not max_tokens or max_tokens <= 0 then return '0' end
  return string.format('%.2f', tokens * 100 / max_tokens)
end

local NOW_US = nil
local function now_us()  -- the server's clock, read once per script
  if not NOW_US then
    local t = redis.call('TIME')
    NOW_US = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return NOW_US
end

-- Counters of the meta hash are changed in memory (bump / meta_set) and written by flush_meta,
-- which run_request calls after every script: one HMGET + one HSET however many items a call
-- adds or removes, instead of an HINCRBY per counter per item.
local META_KNOWN, META_DELTA, META_ORDER = {}, {}, {}
local function meta_touch(f)
  if META_DELTA[f] == nil then
    META_DELTA[f] = 0
    META_ORDER[#META_ORDER + 1] = f
  end
end
local function meta_get(f)
  if META_KNOWN[f] == nil then META_KNOWN[f] = tonumber(redis.call('HGET', K_META, f)) or 0 end
  return META_KNOWN[f] + (META_DELTA[f] or 0)
end
local function bump(f, d)
  meta_touch(f)
  META_DELTA[f] = META_DELTA[f] + d
end
local function meta_set(f, v)
  meta_touch(f)
  META_KNOWN[f], META_DELTA[f] = v, 0
end
local function flush_meta()
  if #META_ORDER == 0 then return end
  local unknown = {}
  for _, f in ipairs(META_ORDER) do
    if META_KNOWN[f] == nil then unknown[#unknown + 1] = f end
  end
  if #unknown > 0 then
    local v = redis.call('HMGET', K_META, unpack(unknown))
    for i, f in ipairs(unknown) do META_KNOWN[f] = tonumber(v[i]) or 0 end
  end
  local args = {}
  for _, f in ipairs(META_ORDER) do
    META_KNOWN[f] = META_KNOWN[f] + META_DELTA[f]
    args[#args + 1] = f
    args[#args + 1] = fmt(META_KNOWN[f])
  end
  redis.call('HSET', K_META, unpack(args))
  META_DELTA, META_ORDER = {}, {}
end

local function score(itype, priority, seq)
  return fmt(RANK[itype] * 1e13 + (100 - priority) * 1e10 + seq)
end

local function pack_attrs(seq, tokens, priority, itype)
  return fmt(seq) .. '|' .. fmt(tokens) .. '|' .. fmt(priority) .. '|' .. itype
end

local function unpack_attrs(v)
  local seq, tok, pr, ty = string.match(v, '^(%d+)|(%d+)|(%d+)|([%w_]+)$')
  return {seq = tonumber(seq), tokens = tonumber(tok), priority = tonumber(pr), type = ty}
end

local function is_int(v, lo, hi)
  return v ~= nil and v == math.floor(v) and v >= lo and v <= hi
end

-- The window's config and counters; for a missing window, the caller's config (new = true).
-- Returns nil when the window is missing and ARGV[1..6] is not a valid config.
local function read_config()
  local m = redis.call('HMGET', K_META, 'max_tokens', 'max_items', 'item_limit', 'threshold',
    'strategy', 'ttl', 'tokens', 'items', 'seq')
  if m[2] then
    META_KNOWN.tokens, META_KNOWN.items, META_KNOWN.seq =
      tonumber(m[7]) or 0, tonumber(m[8]) or 0, tonumber(m[9]) or 0
    return {
      max_tokens = tonumber(m[1]), max_items = tonumber(m[2]), item_limit = tonumber(m[3]),
      threshold = tonumber(m[4]), strategy = m[5], ttl = tonumber(m[6]),
      tokens = tonumber(m[7]) or 0, items = tonumber(m[8]) or 0, seq = tonumber(m[9]) or 0,
      new = false,
    }
  end
  local c = {
    max_tokens = tonumber(ARGV[1]), max_items = tonumber(ARGV[2]), item_limit = tonumber(ARGV[3]),
    threshold = tonumber(ARGV[4]), strategy = ARGV[5], ttl = tonumber(ARGV[6]),
    tokens = 0, items = 0, seq = 0, new = true,
  }
  if not (is_int(c.max_tokens, 0, 1e12) and is_int(c.item_limit, 1, 1e6)
      and is_int(c.max_items, 1, c.item_limit) and c.threshold and c.threshold > 0
      and c.threshold <= 100 and STRATEGIES[c.strategy] and is_int(c.ttl, 0, 1e9)) then
    return nil
  end
  return c
end

-- Write phase: give a new window its meta hash (a new lifetime: ids start again).
local function persist_config(c)
  if not c.new then return end
  WROTE = true
  redis.call('DEL', unpack(ITEM_KEYS))
  redis.call('HSET', K_META, 'max_tokens', fmt(c.max_tokens), 'max_items', fmt(c.max_items),
    'item_limit', fmt(c.item_limit), 'threshold', tostring(c.threshold), 'strategy', c.strategy,
    'ttl', fmt(c.ttl), 'seq', '0', 'tokens', '0', 'items', '0', 'compactions', '0',
    'freed', '0', 'created_ms', fmt(math.floor(now_us() / 1000)))
  META_KNOWN = {seq = 0, tokens = 0, items = 0, compactions = 0, freed = 0}
  c.new = false
end

-- Re-arm the expiry of every key of the window (mutations only; reads never call this).
local function touch(c)
  if c.ttl and c.ttl > 0 then
    for _, k in ipairs(ALL_KEYS) do redis.call('EXPIRE', k, c.ttl) end
  end
end

local function event(name, ...)
  WROTE = true
  redis.call('XADD', K_EVENTS, 'MAXLEN', '~', STREAM_MAXLEN, '*', 'event', name, ...)
end

-- Remove stored items (all must exist), keep the counters true, one item_removed event each.
-- Batched (500 ids per command) so that removing a whole 100000-item window stays fast; the
-- deletions come before the events, so a removal also runs when Redis is at maxmemory.
-- Returns the tokens freed.
local function remove_many(ids, reason)
  if #ids == 0 then return 0 end
  local tokens = meta_get('tokens')
  local freed = 0
  local gone = {}
  local by_type, type_order = {}, {}
  for i = 1, #ids, 500 do
    local chunk = {unpack(ids, i, math.min(i + 499, #ids))}
    local attrs = redis.call('HMGET', K_ATTRS, unpack(chunk))
    redis.call('HDEL', K_ITEMS, unpack(chunk))
    redis.call('HDEL', K_ATTRS, unpack(chunk))
    redis.call('ZREM', K_ORDER, unpack(chunk))
    redis.call('SREM', K_PINNED, unpack(chunk))
    for j, id in ipairs(chunk) do
      local a = unpack_attrs(attrs[j])
      tokens = tokens - a.tokens
      freed = freed + a.tokens
      gone[id] = true
      local c = by_type[a.type]
      if not c then
        c = {0, 0}
        by_type[a.type] = c
        type_order[#type_order + 1] = a.type
      end
      c[1] = c[1] + 1
      c[2] = c[2] + a.tokens
      event('item_removed', 'item_id', id, 'type', a.type, 'token_count', fmt(a.tokens),
        'reason', reason, 'total_tokens_after', fmt(tokens))
    end
  end
  for _, t in ipairs(type_order) do
    bump('items:' .. t, -by_type[t][1])
    bump('tokens:' .. t, -by_type[t][2])
  end
  bump('tokens', -freed)
  bump('items', -#ids)
  if #ids <= 8 then
    for _, id in ipairs(ids) do redis.call('LREM', K_FIFO, 1, id) end
  else
    local keep = {}
    for _, id in ipairs(redis.call('LRANGE', K_FIFO, 0, -1)) do
      if not gone[id] then keep[#keep + 1] = id end
    end
    redis.call('DEL', K_FIFO)
    for i = 1, #keep, 500 do
      redis.call('RPUSH', K_FIFO, unpack(keep, i, math.min(i + 499, #keep)))
    end
  end
  return freed
end

-- Store one new item. it = {id, seq, ts, tail, type, tokens, priority, pinned}; `tail` is the
-- client-encoded JSON object of the remaining fields without its opening brace.
-- Returns the stored JSON.
local function item_head(it)
  return '{"priority":' .. fmt(it.priority) .. ',"pinned":' .. (it.pinned and 'true' or 'false')
    .. ',"seq":' .. fmt(it.seq) .. ',"id":' .. cjson.encode(it.id) .. ',"added_at_us":' .. fmt(it.ts)
    .. ','
end

local function insert_item(it)
  local json = item_head(it) .. it.tail
  redis.call('HSET', K_ITEMS, it.id, json)
  redis.call('HSET', K_ATTRS, it.id, pack_attrs(it.seq, it.tokens, it.priority, it.type))
  redis.call('ZADD', K_ORDER, score(it.type, it.priority, it.seq), it.id)
  redis.call('RPUSH', K_FIFO, it.id)
  if it.pinned then redis.call('SADD', K_PINNED, it.id) end
  bump('tokens', it.tokens)
  bump('items', 1)
  bump('tokens:' .. it.type, it.tokens)
  bump('items:' .. it.type, 1)
  event('item_added', 'item_id', it.id, 'type', it.type, 'token_count', fmt(it.tokens),
    'total_tokens_after', fmt(meta_get('tokens')))
  return json
end

-- Choose what a server-side compaction removes to bring `tokens` down to `target`.
-- removed: ids already gone in this call's plan; extra: items this call added (in memory).
-- stored: false when the window is new (its stored keys do not count).
-- limit: at most this many ids (nil = no limit).
local function plan_compaction(strategy, tokens, target, removed, extra, stored, limit)
  if tokens <= target then return {}, 0 end
  local cands = {}
  if stored then
    local pinned = {}
    for _, id in ipairs(redis.call('SMEMBERS', K_PINNED)) do pinned[id] = true end
    local flat = redis.call('HGETALL', K_ATTRS)
    for i = 1, #flat, 2 do
      local id = flat[i]
      if not pinned[id] and not removed[id] then
        local a = unpack_attrs(flat[i + 1])
        a.id = id
        cands[#cands + 1] = a
      end
    end
  end
  for _, a in ipairs(extra) do
    if not a.pinned and not removed[a.id] then cands[#cands + 1] = a end
  end
  local by_seq = function(x, y) return x.seq < y.seq end
  local ids, freed = {}, 0
  local function take(list)
    for _, a in ipairs(list) do
      if tokens - freed <= target or #ids >= (limit or math.huge) then return false end
      ids[#ids + 1] = a.id
      freed = freed + a.tokens
    end
    return true
  end
  if strategy == 'remove_oldest' then
    table.sort(cands, by_seq)
    take(cands)
  else
    -- priority is 0..100: bucket by it and sort only the buckets that are used, oldest first
    local buckets = {}
    for _, a in ipairs(cands) do
      local b = buckets[a.priority]
      if not b then b = {}; buckets[a.priority] = b end
      b[#b + 1] = a
    end
    for p = 0, 100 do
      local b = buckets[p]
      if b then
        table.sort(b, by_seq)
        if not take(b) then break end
      end
    end
  end
  return ids, freed
end

-- Record a compaction that removed something: counters and the `compacted` event.
-- continued: a later chunk of one compact() call (not counted as another compaction).
local function record_compaction(strategy, removed_count, freed, before, max_tokens, continued)
  if not continued then bump('compactions', 1) end
  bump('freed', freed)
  local after = meta_get('tokens')
  event('compacted', 'strategy', strategy, 'items_removed', fmt(removed_count),
    'tokens_freed', fmt(freed), 'usage_before_percent', pct(before, max_tokens),
    'usage_after_percent', pct(after, max_tokens), 'total_tokens_after', fmt(after))
end

-- Parse one item from ARGV[b+1..b+6] (id or '', body JSON, type, tokens, priority, pinned).
local function parse_item(b)
  local it = {
    id = ARGV[b + 1], body = ARGV[b + 2], type = ARGV[b + 3], tokens = tonumber(ARGV[b + 4]),
    priority = tonumber(ARGV[b + 5]), pinned = ARGV[b + 6] == '1',
  }
  if not RANK[it.type] or not is_int(it.tokens, 1, 1e12) or not is_int(it.priority, 0, 100)
      or string.sub(it.body, 1, 9) ~= '{"type":"' then
    return nil
  end
  it.tail = string.sub(it.body, 2)
  return it
end


-- Exactly-once ------------------------------------------------------------------------------

-- add's record keeps, per new item, its seq and time and where its arguments start; a replay
-- rebuilds the stored JSON from the replayed call's own arguments (the same request carries the
-- same arguments), so any item costs the log ~40 bytes. An item that existed before the call
-- (a safe retry of a caller id) keeps its stored head and is returned as it is stored now, if
-- it still exists.
local function replay_add(rec)
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

local function record_request(rid, fp, record)
  local now = math.floor(now_us() / 1000)
  redis.call('HSET', K_REPLIES, rid, fp .. '\n' .. cjson.encode(record))
  local n = redis.call('RPUSH', K_REQUESTS, fmt(now) .. '|' .. rid)
  if n > REQUEST_MAX then  -- keep the newest REQUEST_MAX
    local old = redis.call('LRANGE', K_REQUESTS, 0, n - REQUEST_MAX - 1)
    redis.call('LTRIM', K_REQUESTS, n - REQUEST_MAX, -1)
    for i = 1, #old do old[i] = string.match(old[i], '^%d+|(.+)$') end
    for i = 1, #old, 500 do redis.call('HDEL', K_REPLIES, unpack(old, i, math.min(i + 499, #old))) end
  else  -- expire the oldest (at most 4 per call: each call adds one)
    for _ = 1, 4 do
      local t, old = string.match(redis.call('LINDEX', K_REQUESTS, 0), '^(%d+)|(.+)$')
      if tonumber(t) > now - REQUEST_TTL_MS then break end
      redis.call('LPOP', K_REQUESTS)
      redis.call('HDEL', K_REPLIES, old)
    end
  end
  redis.call('PEXPIRE', K_REQUESTS, REQUEST_TTL_MS)
  redis.call('PEXPIRE', K_REPLIES, REQUEST_TTL_MS)
end

-- Run a script's main() under the request protocol. main returns its reply and, optionally, a
-- smaller record to keep instead of the reply ({add = ...} for add).
local function run_request(main)
  if REQUEST == '' then
    local reply = main()
    flush_meta()
    return reply
  end
  local rid, fp = string.match(REQUEST, '^(.+)|(%x*)$')
  if not rid then return fail('BADARG', 'request') end
  local prior = redis.call('HGET', K_REPLIES, rid)
  if prior then
    local nl = string.find(prior, '\n', 1, true)
    local pfp = string.sub(prior, 1, nl - 1)
    if pfp ~= '' and fp ~= '' and pfp ~= fp then return fail('REUSED', rid) end
    local rec = cjson.decode(string.sub(prior, nl + 1))
    if rec.add then return replay_add(rec.add) end
    return rec.r
  end
  local reply, record = main()
  flush_meta()
  if WROTE then record_request(rid, fp, record or {r = reply}) end
  return reply
end
