-- add.lua: add one or more items in one atomic step (add and add_many).
-- needs: items compaction
-- KEYS: the nine window keys (see lib/core.lua).
-- ARGV[1..6]: the caller's config (used only if the window does not exist).
-- ARGV[7]: n; then n groups of 6: id ('' = ctx-<seq>), body JSON ({"type":...}), type,
--          token_count, priority, pinned ('1'/'0').
-- Reply: {'ok', added, evicted, compactions, stored_json_1, ..., stored_json_n} in call order
--   (a replayed request returns the same). added counts the new items (one evicted by a later
--   item of the same call still counts; an existing caller id with the same content returns
--   the stored JSON, unchanged), or
--   {'!', 'FULL', unit, current, max, requested} / {'!', 'DUPLICATE', id} / {'!', 'BADARG', what}.
-- The whole call is planned first (FIFO eviction at max_items, then compaction when the add
-- would cross the threshold, then the fit check, item by item); nothing is written unless every
-- item fits, so a failed add leaves the window exactly as it was.

-- The items of the call, checked; an existing caller id with the same content is marked
-- `existing` (a safe retry), with other content it is a DUPLICATE.
local function parse_items(cfg)
  local n = tonumber(ARGV[7])
  if not is_int(n, 1, 1e6) or #ARGV ~= 7 + 6 * n then return nil, fail('BADARG', 'item count') end
  local items = {}
  for i = 1, n do
    local it = parse_item(7 + (i - 1) * 6)
    if not it then return nil, fail('BADARG', 'item ' .. i) end
    if it.id ~= '' and not cfg.new then
      local existing = redis.call('HGET', K_ITEMS, it.id)
      if existing then
        if cjson.decode(existing).content ~= cjson.decode(it.body).content then
          return nil, fail('DUPLICATE', it.id)
        end
        it.existing = existing
      end
    end
    items[i] = it
  end
  return items
end

-- The oldest stored item that is neither pinned nor planned away, read 32 ids at a time; then
-- this call's own unpinned items.
local function evictable(cfg, plan)
  local pos, len, buf, i = 0, cfg.new and 0 or redis.call('LLEN', K_FIFO), {}, 1
  local pinned = {}
  local function is_pinned(id)
    if pinned[id] == nil then pinned[id] = redis.call('SISMEMBER', K_PINNED, id) == 1 end
    return pinned[id]
  end
  return function()
    while true do
      if i > #buf then
        if pos >= len then break end
        buf, pos, i = redis.call('LRANGE', K_FIFO, pos, pos + 31), pos + 32, 1
        if #buf == 0 then break end
      end
      local id = buf[i]
      if not plan.removed[id] and not is_pinned(id) then
        return id, unpack_attrs(redis.call('HGET', K_ATTRS, id))
      end
      i = i + 1
    end
    for _, a in ipairs(plan.added) do
      if not plan.removed[a.id] and not a.pinned then return a.id, a end
    end
    return nil
  end
end

-- Plan room for one item: evict at max_items, compact at the threshold; FULL if it cannot fit.
local function make_room(cfg, plan, it, oldest, strategy)
  local current = plan.tokens
  while plan.count >= cfg.max_items do  -- a loop: a restored window may hold more than max_items
    local id, a = oldest()
    if not id then return fail('FULL', 'items', plan.count, cfg.max_items, 1) end
    plan.removed[id] = true
    plan.count, plan.tokens, plan.evicted = plan.count - 1, plan.tokens - a.tokens, plan.evicted + 1
    plan.actions[#plan.actions + 1] = {'evict', id}
  end
  if cfg.max_tokens == 0 then return nil end
  if (plan.tokens + it.tokens) * 100 > cfg.threshold * cfg.max_tokens then
    local target = math.floor(cfg.max_tokens * math.max(0, cfg.threshold - 15) / 100)
    local ids, freed = plan_compaction(strategy, plan.tokens, target, plan.removed, plan.added, not cfg.new)
    if #ids > 0 then
      for _, id in ipairs(ids) do plan.removed[id] = true end
      plan.actions[#plan.actions + 1] = {'compact', ids, plan.tokens}
      plan.compactions = plan.compactions + 1
      plan.count, plan.tokens = plan.count - #ids, plan.tokens - freed
    end
  end
  if plan.tokens + it.tokens > cfg.max_tokens then
    return fail('FULL', 'tokens', current, cfg.max_tokens, it.tokens)
  end
  return nil
end

local function apply(cfg, plan, strategy)
  persist_config(cfg)
  local ts = now_us()
  for _, act in ipairs(plan.actions) do
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
  meta_set(F.SEQ, plan.seq)
  rearm_ttl(cfg)
end

local cfg = read_config()
if not cfg then return fail('BADARG', 'config') end
local items, err = parse_items(cfg)
if not items then return err end

local plan = {count = cfg.items, tokens = cfg.tokens, seq = cfg.seq, removed = {}, added = {},
  actions = {}, evicted = 0, compactions = 0}
local strategy = SERVER_SIDE[cfg.strategy] and cfg.strategy or 'remove_low_priority'
local oldest = evictable(cfg, plan)
for _, it in ipairs(items) do
  if not it.existing then
    local full = make_room(cfg, plan, it, oldest, strategy)
    if full then return full end
    plan.seq = plan.seq + 1
    it.seq = plan.seq
    if it.id == '' then it.id = 'ctx-' .. fmt(plan.seq) end
    plan.added[#plan.added + 1] = {id = it.id, seq = it.seq, tokens = it.tokens,
      priority = it.priority, type = it.type, pinned = it.pinned}
    plan.count, plan.tokens = plan.count + 1, plan.tokens + it.tokens
    plan.actions[#plan.actions + 1] = {'add', it}
  end
end
apply(cfg, plan, strategy)

local out, rec = {'ok', #plan.added, plan.evicted, plan.compactions}, {#plan.added, plan.evicted, plan.compactions}
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
