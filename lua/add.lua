-- add.lua: add one or more items in one atomic step (add, add_many and replace).
-- needs: items compaction turns
-- KEYS: the window keys (see lib/core.lua).
-- ARGV[1..N_CONFIG]: the caller's config (used only if the window does not exist).
-- ARGV[N_CONFIG + 1]: tokens of the cleared-tool-result placeholder; ARGV[N_CONFIG + 2]: what
--   to replace: '' (nothing: an add), 'all' (every item, pinned too), k (the newest k items) or
--   '=<id> <id> ...' (exactly these newest items, in arrival order: {'!', 'MOVED', ...} when the
--   newest items are others);
--   ARGV[N_CONFIG + 3]: d, most items a compaction inside this call may act on before it asks the
--   caller to compact first (0: never ask); ARGV[N_CONFIG + 4]: conditions, space-separated: the
--   version the window must have ('v=<version>', see window_version in lib/meta.lua: {'!', 'MOVED',
--   'version', current} otherwise), and the turn (lib/turns.lua parse_conditions: a write of the
--   running turn, {'!', 'TURNLOST', why} when it lost the lease; or the start of a turn, which
--   rejects ({'!', 'TURNBUSY', owner, ms left}), enqueues this call's items ({'!', 'QUEUED', n}),
--   interrupts or rolls back the running one; a turn's call takes the pending inputs first, ahead of
--   its own items); ARGV[N_CONFIG + 5]: n (0 only with a replace or a turn); then
--   n groups of ITEM_ARGS (9): id ('' = ctx-<seq>), body JSON ({"content":...}), type, token_count,
--   priority, pinned ('1'/'0'), group ('' = none, or for a tool result: its call's group),
--   tool link ('C:<name>=<call id> ...' for a tool call, 'R:<call id>' for a result, or ''), the
--   letters a build chooses by (parse_item in lib/items.lua).
-- Reply: {'ok', added, evicted, compactions, trigger, freed, item_1, ..., item_n} (each the
--   item's entry, raw_entry in lib/items.lua)
--   in call order (trigger: the tokens in the window when the first compaction began, 0 if none;
--   freed: tokens the compactions freed)
--   (a replayed request returns the same). added counts the new items (one evicted by a later
--   item of the same call still counts; an existing caller id with the same content returns
--   its JSON, unchanged), or {'!', 'FULL', unit, current, max, requested[, tokens held by pinned
--   units, by the other keep_recent units]} /
--   {'!', 'DUPLICATE', id} / {'!', 'TOOLCALL', problem, call id} / {'!', 'BADARG', what} /
--   {'!', 'MOVED', what} (a replace of expected items that are no longer the newest), or
--   {'compact', strategy, target percent, tokens} (nothing written): the first item crosses the
--   threshold, its compaction would act on more than d items, and the add is sure to fit once the
--   window is compacted to that target (see may_defer); the caller compacts (compact.lua, in
--   short parts; clear_tool_results then remove_low_priority) and sends the same add again.
-- A replace plans the replaced items away first (their ids, tool call ids and groups are free for
-- the new items) and removes them (reason "replace") before the new items go in.
-- The whole call is planned first (FIFO eviction of whole units at max_items, then compaction
-- when the add would cross the threshold, then the fit check, item by item); nothing is written
-- unless every item fits, so a failed add leaves the window exactly as it was. A group an item
-- of this call joins is never evicted or compacted by this call.

local BASE = N_CONFIG + 5

-- The conditions of ARGV[N_CONFIG + 4], checked: what they ask of the turn lease (plan_turn in
-- lib/turns.lua), or nil and the error reply (no item written; a turn conflict is an event).
local function check_conditions(cfg)
  local c, bad = parse_conditions(ARGV[N_CONFIG + 4])
  if not c then return nil, bad end
  if c.version then
    local now = cfg.new and '' or window_version()
    if c.version ~= now then return nil, fail('MOVED', 'version', now) end
  end
  if c.begin and ARGV[N_CONFIG + 2] ~= '' then return nil, fail('BADARG', 'conditions') end
  return plan_turn(c)
end

-- A tool call's ids must be new; a tool result answers a call of its group (stored or in this
-- call) and takes that group when it has none (and then its link letter: Q when it answers the
-- call named as the group, else L; contextstore/core/facts.py). Returns an error reply or nil.
local function link_tool_calls(it, batch_calls, dropping)
  for _, call in ipairs(it.calls) do
    if batch_calls[call.id] or (not dropping.calls[call.id] and redis.call('HEXISTS', K_CALLS, call.id) == 1) then
      return fail('TOOLCALL', 'duplicate', call.id)
    end
    batch_calls[call.id] = it.group
  end
  if it.answers then
    local group = batch_calls[it.answers]
    if not group and not dropping.calls[it.answers] then
      local entry = redis.call('HGET', K_CALLS, it.answers)
      group = entry and string.match(entry, '^(%S+)')
    end
    if not group then return fail('TOOLCALL', 'unknown', it.answers) end
    if it.group ~= '' and it.group ~= group then return fail('TOOLCALL', 'group', it.answers) end
    if it.group == '' then
      it.group, it.resolved = group, group
      it.flags = it.flags .. (it.answers == group and 'Q' or 'L')  -- contextstore/core/facts.py
    end
  end
  return nil
end

-- The items of the call, checked; an existing caller id with the same content is marked
-- `existing` (a safe retry), with other content it is a DUPLICATE.
local function parse_items(cfg, dropping, turn)
  local n = tonumber(ARGV[BASE])
  local least = (dropping.replace or turn.token) and 0 or 1
  if not is_int(n, least, 1e6) or #ARGV ~= BASE + ITEM_ARGS * n then return nil, fail('BADARG', 'item count') end
  local items, batch_calls, joining = {}, {}, {}
  for i = 1, n do
    local it = parse_item(BASE + (i - 1) * ITEM_ARGS)
    if not it then return nil, fail('BADARG', 'item ' .. i) end
    local existing = it.id ~= '' and not cfg.new and not dropping.ids[it.id] and raw_item(it.id)
    if existing then
      unpack_attrs(existing[3], it.id)
      if not same_value(check_body(it.id, existing[2]).content, cjson.decode(it.body).content) then
        return nil, fail('DUPLICATE', it.id)
      end
      it.existing = existing
    else
      local err = link_tool_calls(it, batch_calls, dropping)
      if err then return nil, err end
      if it.group ~= '' then joining[it.group] = true end
    end
    items[i] = it
  end
  return items, joining
end

-- The oldest stored unit that can go (no member pinned or planned away, not a group this call
-- joins), reading :fifo 32 ids at a time; then this call's own. Returns its ids and tokens.
local function evictable(cfg, plan)
  local pos, len, buf, i = 0, nil, {}, 1
  local function unit_of(id, a)
    if a.group == '' then return {id}, plan.cleared[id] or a.tokens end
    if plan.joining[a.group] or plan.blocked[a.group] then return nil end
    local ids, tokens = {}, 0
    for _, m in ipairs(group_members(a.group)) do
      if plan.removed[m] or redis.call('SISMEMBER', K_PINNED, m) == 1 then plan.blocked[a.group] = true; return nil end
      ids[#ids + 1] = m
      tokens = tokens + (plan.cleared[m] or unpack_attrs(redis.call('HGET', K_ATTRS, m), m).tokens)
    end
    return ids, tokens
  end
  return function()
    while true do
      if i > #buf then
        len = len or (cfg.new and 0 or redis.call('LLEN', K_FIFO))  -- read when first needed
        if pos >= len then break end
        buf, pos, i = redis.call('LRANGE', K_FIFO, pos, pos + 31), pos + 32, 1
        if #buf == 0 then break end
      end
      local id = buf[i]
      if not plan.removed[id] and redis.call('SISMEMBER', K_PINNED, id) == 0 then
        local ids, tokens = unit_of(id, unpack_attrs(redis.call('HGET', K_ATTRS, id), id))
        if ids then return ids, tokens end
      end
      i = i + 1
    end
    for _, a in ipairs(plan.added) do
      if not plan.removed[a.id] and not a.pinned and (a.group == '' or not plan.joining[a.group]) then
        return {a.id}, a.tokens
      end
    end
    return nil
  end
end

-- The stored tokens of a unit key (members not stored yet, such as the incoming item, count 0).
local function unit_tokens(key)
  local ids = string.sub(key, 1, 1) == 'g' and group_members(string.sub(key, 2)) or {string.sub(key, 2)}
  local tokens = 0
  for _, id in ipairs(ids) do
    local packed = redis.call('HGET', K_ATTRS, id)
    if packed then tokens = tokens + unpack_attrs(packed, id).tokens end
  end
  return tokens
end

-- Tokens no compaction takes: those of the pinned units, and those of the keep_recent newest
-- conversation units that hold no pin.
local function held_tokens(cfg, plan)
  local pinned, kept = {}, kept_units(plan, cfg.keep_recent)
  for _, id in ipairs(redis.call('SMEMBERS', K_PINNED)) do
    pinned[unit_key(id, unpack_attrs(redis.call('HGET', K_ATTRS, id), id))] = true
  end
  local by_pins, by_kept = 0, 0
  for key in pairs(pinned) do by_pins = by_pins + unit_tokens(key) end
  for key in pairs(kept) do
    if not pinned[key] then by_kept = by_kept + unit_tokens(key) end
  end
  return by_pins, by_kept
end

-- Tokens no compaction takes (an upper bound): pinned units, and the keep_recent newest
-- conversation units.
local function untouchable_tokens(cfg, plan)
  local by_pins, by_kept = held_tokens(cfg, plan)
  return by_pins + by_kept
end

-- Whether this add may ask its caller to compact first: it is the call's first item and no
-- replace (evictions planned for it are dropped with the rest of the plan: the compaction frees
-- items too), it joins no stored group, and it is sure to fit once the window is compacted to
-- `target`: max(target, untouchable tokens) + the item <= max.
local function may_defer(cfg, plan, it, target)
  if plan.defer_after == 0 or cfg.new or #plan.added > 0 or #plan.dropped > 0 then return false end
  for group in pairs(plan.joining) do
    if redis.call('HEXISTS', K_GROUPS, group) == 1 then return false end
  end
  if redis.call('SCARD', K_PINNED) > 1000 then return false end
  return math.max(target, untouchable_tokens(cfg, plan)) + it.tokens <= token_limit(cfg)
end

-- Plan room for one item: evict whole units at max_items, compact at the threshold; FULL if it
-- cannot fit; {'compact', ...} when the caller should compact first (see may_defer).
local function make_room(cfg, plan, it, oldest)
  local current = plan.tokens
  while plan.count >= cfg.max_items do  -- a loop: a restored window may hold more than max_items
    local ids, tokens = oldest()
    if not ids then return fail('FULL', 'items', plan.count, cfg.max_items, 1) end
    for _, id in ipairs(ids) do plan.removed[id] = true end
    plan.count, plan.tokens, plan.evicted = plan.count - #ids, plan.tokens - tokens, plan.evicted + #ids
    plan.actions[#plan.actions + 1] = {'evict', ids}
  end
  if cfg.max_tokens == 0 then return nil end
  local limit = token_limit(cfg)
  plan.incoming = it  -- keep_recent counts the units after this add (lib/compaction.lua kept_units)
  -- the usage the threshold and the target look at counts what a chat build adds to each item
  -- and to the whole (USAGE.message_overhead, reply_priming), so a window below its threshold
  -- builds whole
  local overhead = USAGE.message_overhead
  if (plan.tokens + it.tokens + overhead * (plan.count + 1) + USAGE.reply_priming) * 100 > cfg.threshold * limit then
    -- the window's compaction_target, never above its threshold; without one, 15 points below
    local percent = cfg.target > 0 and math.min(cfg.target, cfg.threshold) or math.max(0, cfg.threshold - 15)
    local target = math.max(0, math.floor(limit * percent / 100) - overhead * plan.count - USAGE.reply_priming)
    local defer = may_defer(cfg, plan, it, target)
    local acts, freed = plan_compaction(plan.strategy, plan.tokens, target, plan, cfg, plan.placeholder,
      defer and plan.defer_after or nil, true)
    if defer and plan.limited then  -- the target as a percent of the limit: the overhead counted in
      return {'compact', plan.strategy, string.format('%.17g', (target + 0.5) * 100 / limit), fmt(plan.tokens)}
    end
    if #acts > 0 then
      for _, act in ipairs(acts) do
        if act[1] == 'clear' then
          plan.cleared[act[2].id] = plan.placeholder
        else
          for _, id in ipairs(act[2].ids) do plan.removed[id] = true end
          plan.count = plan.count - #act[2].ids
        end
      end
      plan.actions[#plan.actions + 1] = {'compact', acts, plan.tokens}
      plan.trigger, plan.freed = plan.trigger or plan.tokens, plan.freed + freed
      plan.compactions, plan.tokens = plan.compactions + 1, plan.tokens - freed
    end
  end
  if plan.tokens + it.tokens > limit then
    local by_pins, by_kept = held_tokens(cfg, plan)
    return fail('FULL', 'tokens', current, limit, it.tokens, fmt(by_pins), fmt(by_kept))
  end
  plan.incoming = nil
  return nil
end

-- What a replace or a rollback takes away (`out`): the stored items of `list`, their ids, tokens and
-- tool call ids, and their removal (lib/items.lua: read and checked now, before any write).
local function dropping_of(out, list)
  out.list = list
  for _, id in ipairs(out.list) do
    out.ids[id] = true
    out.tokens = out.tokens + unpack_attrs(redis.call('HGET', K_ATTRS, id), id).tokens
    for _, call in ipairs(tool_call_ids(id)) do out.calls[call] = true end
  end
  out.removal = removal(list)
  return out
end

-- What a replace takes away: the newest k items (or all), their ids and their tool call ids.
-- Returns the set, or nil and an error reply.
local function replaced(cfg)
  local what = ARGV[N_CONFIG + 2]
  local out = {replace = what ~= '', list = {}, ids = {}, calls = {}, tokens = 0}
  local expected = string.sub(what, 1, 1) == '=' and words(string.sub(what, 2)) or nil
  if expected then
    if #expected == 0 or #expected > MAX_ITEM_LIMIT then return nil, fail('BADARG', 'replace') end
    local now = cfg.new and {} or redis.call('LRANGE', K_FIFO, -#expected, -1)
    local same = #now == #expected
    for i = 1, #expected do same = same and now[i] == expected[i] end
    if not same then return nil, fail('MOVED', 'the newest items are not the ones to replace') end
  end
  if what == '' or cfg.new then return out end
  local k = (what == 'all' and 0) or (expected and #expected) or tonumber(what)
  if not is_int(k, 0, MAX_ITEM_LIMIT) or (what ~= 'all' and k == 0) then return nil, fail('BADARG', 'replace') end
  return dropping_of(out, redis.call('LRANGE', K_FIFO, what == 'all' and 0 or -k, -1))
end

-- Every removal the plan makes (evictions, compactions), read and checked before the first write
-- (an item this call adds and a later one evicts is taken from the plan, and a tool result it
-- clears and then removes counts the tokens it will have).
local function removals(plan)
  local own = {}
  for _, a in ipairs(plan.added) do own[a.id] = a end
  for _, act in ipairs(plan.actions) do
    if act[1] == 'evict' then
      act.removal = removal(act[2], own, plan.cleared)
    elseif act[1] == 'compact' then
      act.removal = compaction_removal(act[2], own, plan.cleared)
    end
  end
end

-- The ids of the inputs this call takes as a turn's (lib/turns.lua apply_turn): the pending inputs it
-- took, and all of its items when it begins the turn.
local function inputs_of(plan)
  local out = {}
  for i, a in ipairs(plan.added) do
    if (plan.turn.begin or i <= plan.spliced) and not plan.removed[a.id] then out[#out + 1] = a.id end
  end
  return out
end

local function apply(cfg, plan, dropped)
  removals(plan)
  persist_config(cfg)
  remove_many(plan.dropped, plan.drop_reason, dropped)
  local ts = now_us()
  for _, act in ipairs(plan.actions) do
    if act[1] == 'evict' then
      remove_many(act[2], 'eviction', act.removal)
    elseif act[1] == 'compact' then
      local removed, cleared, freed = apply_compaction(act[2], plan.placeholder, nil, act.removal)
      record_compaction({strategy = plan.strategy, removed = removed, cleared = cleared, freed = freed,
        before = act[3], max_tokens = token_limit(cfg), changed = act[2]})
    else
      act[2].ts = ts
      act[2].json = insert_item(act[2])
    end
  end
  apply_turn(plan.turn, plan, inputs_of(plan))
  meta_set(F.SEQ, plan.seq)
  rearm_ttl(cfg)
  COUNTERS_KNOWN = true
end

local function reply(items, plan)
  local head = {#plan.added, plan.evicted, plan.compactions, plan.trigger or 0, plan.freed}
  local out, rec = {'ok', unpack(head)}, {unpack(head)}
  for _, e in ipairs(plan.turn.handed or {}) do out[#out + 1] = e end  -- taken over: ahead of the pending
  for i, it in ipairs(items) do
    local body_at = BASE + (i - 1) * ITEM_ARGS + 2
    if it.existing then
      local e = it.existing
      out[#out + 1] = e
      rec[#rec + 1] = {'=', stored_time(e[2]), body_at, it.id, e[3], e[4]}
    else
      out[#out + 1] = it.json
      rec[#rec + 1] = {'+', fmt(it.seq), fmt(it.ts), body_at - 2, it.resolved}
    end
  end
  if plan.spliced > 0 or #(plan.turn.handed or {}) > 0 then return out end  -- inputs not in ARGV of a retry: keep the reply
  return out, {add = rec, m = meta_get(F.REMOVED_BY_CALLER)}
end

-- main: the call (the helpers above are defined once per library load; see drivers/scripts.py)
local cfg = read_config()
if not cfg then return fail('BADARG', 'config') end
local placeholder = tonumber(ARGV[N_CONFIG + 1])
if not is_int(placeholder, 1, MAX_TOKENS) then return fail('BADARG', 'placeholder tokens') end
local defer_after = tonumber(ARGV[N_CONFIG + 3])
if not is_int(defer_after, 0, 1e6) then return fail('BADARG', 'defer') end
local turn, unmet = check_conditions(cfg)
if not turn then return unmet end
local dropping, bad = replaced(cfg)
if not dropping then return bad end
if turn.rollback then
  dropping = dropping_of({list = {}, ids = {}, calls = {}, tokens = 0, reason = 'rollback'}, turn.rollback)
end
local spliced = turn.take and splice_pending(BASE, turn) or 0
local items, joining = parse_items(cfg, dropping, turn)
if not items then return joining end  -- the error reply
if turn.queue then return enqueue_inputs(BASE, #items, turn) end

local plan = {count = cfg.items - #dropping.list, tokens = cfg.tokens - dropping.tokens, seq = cfg.seq,
  removed = dropping.ids, dropped = dropping.list, added = {}, cleared = {},
  actions = {}, evicted = 0, compactions = 0, freed = 0, joining = joining, blocked = {}, stored = not cfg.new,
  placeholder = placeholder, strategy = SERVER_SIDE[cfg.strategy] and cfg.strategy or 'remove_low_priority',
  defer_after = defer_after, turn = turn, spliced = spliced, drop_reason = dropping.reason or 'replace'}
local oldest = evictable(cfg, plan)
for _, it in ipairs(items) do
  if not it.existing then
    local full = make_room(cfg, plan, it, oldest)
    if full then return full end
    plan.seq = plan.seq + 1
    it.seq = plan.seq
    if it.id == '' then it.id = 'ctx-' .. fmt(plan.seq) end
    plan.added[#plan.added + 1] = {id = it.id, seq = it.seq, tokens = it.tokens, priority = it.priority,
      type = it.type, pinned = it.pinned, group = it.group, flags = it.flags, calls = it.calls, new = true}
    plan.count, plan.tokens = plan.count + 1, plan.tokens + it.tokens
    plan.actions[#plan.actions + 1] = {'add', it}
  end
end
apply(cfg, plan, dropping.removal)
return reply(items, plan)
