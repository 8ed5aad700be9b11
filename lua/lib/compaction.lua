-- lib/compaction.lua: what a server-side compaction does (remove whole units, or clear old tool
-- results), planned in memory first, then applied and recorded.
-- needs: items turns
--
-- A unit is a group (a tool call and its results: all or nothing) or one ungrouped item. A unit
-- with a pinned member is never removed; the keep_recent newest conversation units (a group, or
-- an ungrouped user or assistant message) are never removed or cleared.

local CONVERSATION = {user_message = true, assistant_message = true}

-- Planning walks the indexes instead of reading every item, so its work grows with what it
-- removes, not with the window: :fifo from the head (remove_oldest), :order by priority
-- bucket (remove_low_priority, clear_tool_results), :fifo from the tail (keep_recent).
-- `state` = {stored, removed (id -> true), cleared (id -> tokens), added (this call's new
-- items, in seq order), joining (groups this call adds to)}.

-- The priorities present among rank r's items in :order, lowest first (one call each).
local function priorities_in(r)
  local out, below = {}, band(r, -1)
  while true do
    local got = redis.call('ZREVRANGEBYSCORE', K_ORDER, '(' .. fmt(below), fmt(band(r, MAX_PRIORITY)), 'WITHSCORES',
      'LIMIT', 0, 1)
    if #got == 0 then return out end
    local p = priority_of(got[2], r)
    out[#out + 1] = p
    below = band(r, p)
  end
end

-- The ids of rank r and priority p in :order, in seq order, read 128 at a time.
local function bucket(r, p)
  local lo = band(r, p)
  local s = {buf = {}, i = 1, off = 0, done = false}
  function s.peek()
    if s.i > #s.buf and not s.done then
      local flat = redis.call('ZRANGEBYSCORE', K_ORDER, fmt(lo), fmt(band(r, p - 1) - 1), 'WITHSCORES',
        'LIMIT', s.off, 128)
      s.buf, s.i, s.off, s.done = {}, 1, s.off + #flat / 2, #flat < 256
      for j = 1, #flat, 2 do s.buf[#s.buf + 1] = {flat[j], seq_of(flat[j + 1])} end
    end
    return s.buf[s.i]
  end
  return s
end

-- An iterator over several buckets at once, in seq order: id, seq.
local function merged(buckets)
  return function()
    local best, from
    for _, b in ipairs(buckets) do
      local head = b.peek()
      if head and (not best or head[2] < best[2]) then best, from = head, b end
    end
    if not best then return nil end
    from.i = from.i + 1
    return best[1], best[2]
  end
end

-- Stored items in removal order for remove_low_priority: id, key (priority, then seq, as one
-- number), then this call's own items of the same priority (id, key, the item).
local function walk_by_priority(state)
  local ranks_at, present, ranks = {}, {}, {}
  for _, r in pairs(RANK) do ranks[r] = true end
  for r in pairs(state.stored and ranks or {}) do
    for _, p in ipairs(priorities_in(r)) do
      if not ranks_at[p] then ranks_at[p] = {}; present[#present + 1] = p end
      table.insert(ranks_at[p], r)
    end
  end
  local added = {}
  for _, a in ipairs(state.added or {}) do
    added[#added + 1] = a
    if not ranks_at[a.priority] then ranks_at[a.priority] = {}; present[#present + 1] = a.priority end
  end
  table.sort(present)
  table.sort(added, function(x, y) return x.priority < y.priority or (x.priority == y.priority and x.seq < y.seq) end)
  local k, nxt, ai = 0, nil, 1
  return function()
    while true do
      if nxt then
        local id, seq = nxt()
        if id then return id, present[k] * PRIORITY_WEIGHT + seq end
        local a = added[ai]
        if a and a.priority == present[k] then
          ai = ai + 1
          return a.id, a.priority * PRIORITY_WEIGHT + a.seq, a
        end
      end
      k = k + 1
      if not present[k] then return nil end
      local bs = {}
      for _, r in ipairs(ranks_at[present[k]]) do bs[#bs + 1] = bucket(r, present[k]) end
      nxt = merged(bs)
    end
  end
end

-- Stored items in arrival order (:fifo from the head), then this call's own: id, 0 (arrival
-- order needs no key)[, the item].
local function walk_by_arrival(state)
  local pos, buf, i, ai = 0, {}, 1, 1
  local len = state.stored and redis.call('LLEN', K_FIFO) or 0
  return function()
    while i > #buf and pos < len do
      buf, i, pos = redis.call('LRANGE', K_FIFO, pos, pos + 127), 1, pos + 128
    end
    if i <= #buf then
      i = i + 1
      return buf[i - 1], 0
    end
    local a = (state.added or {})[ai]
    if a then
      ai = ai + 1
      return a.id, 0, a
    end
    return nil
  end
end

-- A stored item's attributes as planning sees them (cleared tokens from state.cleared).
local function stored_attrs(state, id)
  local a = unpack_attrs(redis.call('HGET', K_ATTRS, id), id)
  a.id, a.pinned = id, redis.call('SISMEMBER', K_PINNED, id) == 1
  if state.cleared and state.cleared[id] then a.tokens, a.flags = state.cleared[id], cleared_flags(a.flags) end
  return a
end

-- The key of the unit an item belongs to: its group, or the item alone.
local function unit_key(id, a)
  return a.group ~= '' and ('g' .. a.group) or ('i' .. id)
end

-- The keep_recent newest conversation units (a group, or an ungrouped user or assistant
-- message), as a set of unit keys, walking the item an add is making room for
-- (state.incoming: the newest units are those after the add, so a conversation always moves
-- on), this call's items, then :fifo from the tail.
local function recent_units(state, keep_recent)
  local kept, n = {}, 0
  local function count(id, a)
    if a.group ~= '' or CONVERSATION[a.type] then
      local key = unit_key(id, a)
      if not kept[key] then kept[key], n = true, n + 1 end
    end
    return n >= keep_recent
  end
  if (keep_recent or 0) <= 0 then return kept end
  local incoming = state.incoming
  if incoming and count(incoming.id ~= '' and incoming.id or '+', incoming) then return kept end
  local added = state.added or {}
  for i = #added, 1, -1 do
    if not state.removed[added[i].id] and count(added[i].id, added[i]) then return kept end
  end
  local pos = -1
  while state.stored do
    local ids = redis.call('LRANGE', K_FIFO, pos - 127, pos)
    if #ids == 0 then break end
    local attrs = redis.call('HMGET', K_ATTRS, unpack(ids))
    for j = #ids, 1, -1 do
      if not state.removed[ids[j]] and count(ids[j], unpack_attrs(attrs[j], ids[j])) then return kept end
    end
    pos = pos - 128
  end
  return kept
end

-- The units no compaction takes besides pinned ones: the keep_recent newest conversation
-- units (recent_units, each `true`) and the units of what the running turn wrote ('turn').
local function kept_units(state, keep_recent)
  local kept = recent_units(state, keep_recent)
  for id in pairs(running_turn_ids()) do
    local packed = not state.removed[id] and redis.call('HGET', K_ATTRS, id)
    if packed then
      local key = unit_key(id, unpack_attrs(packed, id))
      kept[key] = kept[key] or 'turn'
    end
  end
  return kept
end

-- The unit of a walked item (nil when it was removed or its group was seen): {key, ids, items,
-- tokens, seq (oldest), priority (highest), pinned, conversation, name}.
local function unit_of(state, seen, id, added)
  if state.removed[id] or seen[id] then return nil end
  local a = added or stored_attrs(state, id)
  a.id = id
  if a.group == '' then
    seen[id] = true
    return {name = unit_key(id, a), ids = {id}, items = {a}, tokens = a.tokens, seq = a.seq,
      priority = a.priority, pinned = a.pinned, conversation = CONVERSATION[a.type] == true}
  end
  local u = {name = unit_key(id, a), ids = {}, items = {}, tokens = 0, seq = a.seq, priority = a.priority,
    pinned = false, conversation = true, joining = state.joining ~= nil and state.joining[a.group] == true}
  for _, m in ipairs(u.joining and {} or group_members(a.group)) do
    if not state.removed[m] then
      local ma = m == id and a or stored_attrs(state, m)
      ma.id, seen[m] = m, true
      u.ids[#u.ids + 1], u.items[#u.items + 1], u.tokens = m, ma, u.tokens + ma.tokens
      u.seq, u.priority, u.pinned = math.min(u.seq, ma.seq), math.max(u.priority, ma.priority), u.pinned or ma.pinned
    end
  end
  seen[id] = true
  return u
end

-- Whole units in the order `strategy` removes them (an iterator), skipping units with a pinned
-- member, groups this call joins and kept units (kept(): the set of kept unit keys). For
-- remove_low_priority a unit's key is (its highest priority, its oldest seq): a unit is found
-- by the walk at its oldest member, at or before its key, and held until the walk passes it.
local function removable_units(strategy, state, kept)
  local walk = strategy == 'remove_oldest' and walk_by_arrival(state) or walk_by_priority(state)
  local by_priority, seen, held, cur = strategy ~= 'remove_oldest', {}, {}, nil
  local function removable(u)
    local held = u and kept()[u.name]
    return u and not u.pinned and not u.joining and not ((u.conversation and held) or held == 'turn')
  end
  return function()
    while true do
      cur = cur or {walk()}  -- the walked item not taken yet: id, key, this call's item
      local id, key = cur[1], cur[2]
      local u = nil
      if #held > 0 and (id == nil or held[#held].key < key) then
        u = table.remove(held)  -- held is kept largest key first
      elseif id == nil then
        return nil
      else
        u, cur = unit_of(state, seen, id, cur[3]), nil
        if u and by_priority then
          u.key = u.priority * PRIORITY_WEIGHT + u.seq
          if u.key > key then
            local at = #held + 1
            while at > 1 and held[at - 1].key < u.key do at = at - 1 end
            table.insert(held, at, u)
            u = nil
          end
        end
      end
      if removable(u) then return u end
    end
  end
end

-- Stored tool results that may be cleared, oldest first (an iterator): not pinned, not cleared
-- yet, not in a kept unit, larger than the placeholder.
local function clearable(state, kept, placeholder)
  local bs = {}
  if state.stored then
    for _, p in ipairs(priorities_in(RANK.tool_result)) do bs[#bs + 1] = bucket(RANK.tool_result, p) end
  end
  local nxt = merged(bs)
  return function()
    while true do
      local id = nxt()
      if not id then return nil end
      if not state.removed[id] then
        local a = stored_attrs(state, id)
        if a.type == 'tool_result' and not a.pinned and not string.find(a.flags, 'c', 1, true) and a.tokens > placeholder
            and not (state.joining and state.joining[a.group]) and not kept()[unit_key(id, a)] then
          return a
        end
      end
    end
  end
end

-- A candidate's cleared JSON (marked with `compaction`, the number of the compaction clearing
-- it), or nil when its tool is excluded or its JSON is not in the stored layout (then it is left
-- as it is). (tool_of is its own local: the function library holds add's and commit's helpers
-- within Lua's 200 locals, test_lua_files.py counts them.)
local function cleared_version(a, cfg, placeholder, compaction)
  local function tool_of(item)  -- the tool a tool result answers (its call's tool name)
    local meta = item.metadata
    local call = type(meta) == 'table' and meta.tool_call_id
    local entry = type(call) == 'string' and redis.call('HGET', K_CALLS, call)
    return entry and string.match(entry, ' (.*)$') or nil
  end
  local json = redis.call('HGET', K_ITEMS, a.id)
  if not json then corrupt(K_ITEMS, a.id, 'missing') end
  if next(cfg.excluded) and cfg.excluded[tool_of(stored_object(K_ITEMS, a.id, json)) or ''] then return nil end
  return cleared_json(json, a, compaction)
end

-- Plan a compaction of `state`'s window from `tokens` down to `target`, freeing at least
-- cfg.clear_at_least (the least gain worth the prompt cache a compaction invalidates): a list of
-- actions ({'clear', item, tokens freed} or {'remove', unit, tokens}) of at most `limit` items,
-- and the tokens they free. clear_tool_results clears nothing unless all it may clear frees
-- clear_at_least (candidates past the limit count toward it); with `fallback` it goes on with
-- remove_low_priority when clearing alone does not get there. Sets state.limited when the limit
-- stopped it (the plan is then a part: without a limit it would act on more); a part that
-- continues one (state.continued) goes on below the target until clear_at_least is freed.
local function plan_compaction(strategy, tokens, target, state, cfg, placeholder, limit, fallback)
  local actions, freed, n, least = {}, 0, 0, cfg.clear_at_least
  if tokens <= target and not state.continued then return actions, 0 end
  limit = limit or math.huge
  local kept_set
  local function kept()
    kept_set = kept_set or kept_units(state, cfg.keep_recent)
    return kept_set
  end
  local function done(gain) return tokens - gain <= target and gain >= least end
  if strategy == 'clear_tool_results' then
    local cleared, later = 0, 0
    local number = meta_get(F.COMPACTIONS) + (state.continued and 0 or 1)  -- record_compaction's count
    for a in clearable(state, kept, placeholder) do
      if done(cleared) then break end
      if n >= limit then
        state.limited = true
        if cleared + later >= least then break end
      end
      local json = cleared_version(a, cfg, placeholder, number)
      if json and n >= limit then
        later = later + a.tokens - placeholder
      elseif json then
        a.cleared_json = json
        actions[#actions + 1], cleared, n = {'clear', a, a.tokens - placeholder}, cleared + a.tokens - placeholder, n + 1
      end
    end
    if cleared + later < least then actions, cleared, n = {}, 0, 0 end
    state.cleared = state.cleared or {}
    for _, act in ipairs(actions) do
      state.cleared[act[2].id], act[2].tokens, act[2].flags = placeholder, placeholder, cleared_flags(act[2].flags)
    end
    freed = cleared
    if not fallback then return actions, freed end
    strategy = 'remove_low_priority'
  end
  for u in removable_units(strategy, state, kept) do
    if done(freed) then break end
    if n >= limit then state.limited = true break end
    actions[#actions + 1], freed, n = {'remove', u, u.tokens}, freed + u.tokens, n + #u.ids
  end
  return actions, freed
end

-- The removal (lib/items.lua) of the units planned `actions` remove: read and checked, no write.
local function compaction_removal(actions, own, cleared)
  local ids = {}
  for _, act in ipairs(actions) do
    if act[1] ~= 'clear' then
      for _, id in ipairs(act[2].ids) do ids[#ids + 1] = id end
    end
  end
  return removal(ids, own, cleared)
end

-- Apply planned actions (`prepared`: their compaction_removal, read before the calling script's
-- first write; nil: read here, before this one's); returns items removed, items cleared, tokens freed.
local function apply_compaction(actions, placeholder, reason, prepared)
  local gone, cleared, freed = prepared or compaction_removal(actions), 0, 0
  for _, act in ipairs(actions) do
    if act[1] == 'clear' then
      freed = freed + clear_content(act[2].id, act[2].cleared_json, placeholder)
      cleared = cleared + 1
    end
  end
  freed = freed + remove_many(gone.ids, reason or 'compaction', gone)
  return #gone.ids, cleared, freed
end

-- What a compaction cost the provider's prompt cache: the tokens an arrival-order prompt held
-- from the first item it changed (seq `first`) on, before it (`before`: the window's tokens then;
-- `freed`: what it freed, all of it from `first` on). It sums the shorter side of :fifo around
-- that item: the unchanged items before it, or those from it on as they are now; nil when an
-- attrs value is in a shape no script writes (this runs after writes: nothing may stop the call).
-- (Its bisection is list.lua's first_after, but one that stops at a corrupt value instead of
-- raising; its helpers are its own locals: add's and commit's blocks hold 199 of Lua's 200.)
local function invalidated_tokens(first, before, freed)
  local function tokens_of(from, to)  -- of the items in :fifo positions from..to
    local sum = 0
    for i = from, to, 256 do
      local ids = redis.call('LRANGE', K_FIFO, i, math.min(i + 255, to))
      for _, v in ipairs(#ids > 0 and redis.call('HMGET', K_ATTRS, unpack(ids)) or {}) do
        local a = parse_attrs(v)
        if not a then return nil end
        sum = sum + a.tokens
      end
    end
    return sum
  end
  local len = redis.call('LLEN', K_FIFO)
  local lo, hi = 0, len  -- bisection (:fifo is in seq order) for the first item of seq >= first
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local a = parse_attrs(redis.call('HGET', K_ATTRS, redis.call('LINDEX', K_FIFO, mid) or ''))
    if not a then return nil end
    if a.seq < first then lo = mid + 1 else hi = mid end
  end
  if lo <= len - lo then
    local kept = tokens_of(0, lo - 1)
    return kept and before - kept
  end
  local rest = tokens_of(lo, len - 1)
  return rest and rest + freed
end

-- Record a compaction that removed or cleared something (`c`: strategy, removed and cleared
-- (counts), freed, before (the window's tokens then), max_tokens, changed (the attrs of the items
-- it removed or cleared, or its planned actions), continued (a later chunk of one compact() call:
-- not counted as another compaction), summary_id (the summary that replaced the removed items, if
-- any)): the counters and the `compacted` event.
local function record_compaction(c)
  local first = math.huge
  for _, x in ipairs(c.changed) do
    local members = x.seq and {x} or (x[1] == 'clear' and {x[2]} or x[2].items)
    for _, a in ipairs(members) do first = math.min(first, a.seq) end
  end
  if not c.continued then
    bump(F.COMPACTIONS, 1)
    RUN.compactions = RUN.compactions + 1
  end
  bump(F.FREED, c.freed)
  RUN.freed = RUN.freed + c.freed
  local after, lost = meta_get(F.TOKENS), invalidated_tokens(first, c.before, c.freed)
  RUN.invalidated = RUN.invalidated + (lost or 0)
  local fields = {'strategy', c.strategy, 'items_removed', fmt(c.removed), 'items_cleared', fmt(c.cleared or 0),
    'tokens_freed', fmt(c.freed), 'usage_before_percent', pct(c.before, c.max_tokens),
    'usage_after_percent', pct(after, c.max_tokens), 'total_tokens_after', fmt(after)}
  if lost then fields[#fields + 1], fields[#fields + 2] = 'tokens_invalidated', fmt(lost) end
  if (c.summary_id or '') ~= '' then fields[#fields + 1], fields[#fields + 2] = 'summary_id', c.summary_id end
  event('compacted', unpack(fields))
end
