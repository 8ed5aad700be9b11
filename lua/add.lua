-- add.lua: add one or more items in one atomic step (add and add_many).
-- KEYS: the nine window keys (see _lib.lua).
-- ARGV[1..6]: the caller's config (used only if the window does not exist).
-- ARGV[7]: n; then n groups of 6: id ('' = ctx-<seq>), body JSON ({"type":...}), type,
--          token_count, priority, pinned ('1'/'0').
-- Reply: {'ok', added, evicted, compactions, stored_json_1, ..., stored_json_n} in call order
--   (a replayed request returns the same);
--   added counts the new items (one evicted by a later item of the same call still counts) (an existing caller id with the
--   same content returns the stored JSON, unchanged), or
--   {'!', 'FULL', unit, current, max, requested} / {'!', 'DUPLICATE', id} / {'!', 'BADARG', what}.
-- The whole call is planned first (FIFO eviction at max_items, then compaction when the add
-- would cross the threshold, then the fit check, item by item); nothing is written unless every
-- item fits, so a failed add leaves the window exactly as it was.

local cfg = read_config()
if not cfg then return fail('BADARG', 'config') end
local n = tonumber(ARGV[7])
if not is_int(n, 1, 1e6) or #ARGV ~= 7 + 6 * n then return fail('BADARG', 'item count') end

local items = {}
for i = 1, n do
  local it = parse_item(7 + (i - 1) * 6)
  if not it then return fail('BADARG', 'item ' .. i) end
  if it.id ~= '' and not cfg.new then
    local existing = redis.call('HGET', K_ITEMS, it.id)
    if existing then
      if cjson.decode(existing).content ~= cjson.decode(it.body).content then
        return fail('DUPLICATE', it.id)
      end
      it.existing = existing
    end
  end
  items[i] = it
end

-- plan ---------------------------------------------------------------------------------------
local count, tokens, seq = cfg.items, cfg.tokens, cfg.seq
local removed, added, actions = {}, {}, {}
local evicted, compactions = 0, 0
local strategy = SERVER_SIDE[cfg.strategy] and cfg.strategy or 'remove_low_priority'

local fifo_pos, fifo_len, buf, buf_i = 0, 0, {}, 1
if not cfg.new then fifo_len = redis.call('LLEN', K_FIFO) end
local pinned_cache = {}
local function stored_pinned(id)
  if pinned_cache[id] == nil then
    pinned_cache[id] = redis.call('SISMEMBER', K_PINNED, id) == 1
  end
  return pinned_cache[id]
end

-- the oldest item that is neither pinned nor already planned away
local function oldest_evictable()
  while true do
    if buf_i > #buf then
      if fifo_pos >= fifo_len then break end
      buf = redis.call('LRANGE', K_FIFO, fifo_pos, fifo_pos + 31)
      fifo_pos = fifo_pos + 32
      buf_i = 1
      if #buf == 0 then break end
    end
    local id = buf[buf_i]
    if not removed[id] and not stored_pinned(id) then
      return id, unpack_attrs(redis.call('HGET', K_ATTRS, id))
    end
    buf_i = buf_i + 1
  end
  for _, a in ipairs(added) do
    if not removed[a.id] and not a.pinned then return a.id, a end
  end
  return nil
end

for _, it in ipairs(items) do
  if not it.existing then
    local current = tokens
    while count >= cfg.max_items do  -- a loop: a restored window may hold more than max_items
      local id, a = oldest_evictable()
      if not id then return fail('FULL', 'items', count, cfg.max_items, 1) end
      removed[id] = true
      count = count - 1
      tokens = tokens - a.tokens
      evicted = evicted + 1
      actions[#actions + 1] = {'evict', id}
    end
    if cfg.max_tokens > 0 then
      if (tokens + it.tokens) * 100 > cfg.threshold * cfg.max_tokens then
        local target = math.floor(cfg.max_tokens * math.max(0, cfg.threshold - 15) / 100)
        local ids, freed = plan_compaction(strategy, tokens, target, removed, added, not cfg.new)
        if #ids > 0 then
          for _, id in ipairs(ids) do removed[id] = true end
          actions[#actions + 1] = {'compact', ids, tokens}
          compactions = compactions + 1
          count = count - #ids
          tokens = tokens - freed
        end
      end
      if tokens + it.tokens > cfg.max_tokens then
        return fail('FULL', 'tokens', current, cfg.max_tokens, it.tokens)
      end
    end
    seq = seq + 1
    it.seq = seq
    if it.id == '' then it.id = 'ctx-' .. fmt(seq) end
    added[#added + 1] = {id = it.id, seq = seq, tokens = it.tokens, priority = it.priority,
      type = it.type, pinned = it.pinned}
    count = count + 1
    tokens = tokens + it.tokens
    actions[#actions + 1] = {'add', it}
  end
end

-- apply --------------------------------------------------------------------------------------
persist_config(cfg)
local ts = now_us()
for _, act in ipairs(actions) do
  if act[1] == 'evict' then
    remove_many({act[2]}, 'eviction')
  elseif act[1] == 'compact' then
    local freed = remove_many(act[2], 'compaction')
    record_compaction(strategy, #act[2], freed, act[3], cfg.max_tokens)
  else
    act[2].ts = ts
    act[2].json = insert_item(act[2])
  end
end
meta_set('seq', seq)
touch(cfg)

local out = {'ok', #added, evicted, compactions}
local rec = {#added, evicted, compactions}
for i, it in ipairs(items) do
  local body_at = 7 + (i - 1) * 6 + 2
  if it.existing then
    out[#out + 1] = it.existing
    rec[#rec + 1] = {'=', string.match(it.existing, '^(.-,)"type":"'), body_at, it.id}
  else
    out[#out + 1] = it.json
    rec[#rec + 1] = {'+', fmt(it.seq), fmt(it.ts), body_at - 2}
  end
end
return out, {add = rec}
