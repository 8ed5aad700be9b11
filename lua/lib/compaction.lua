-- lib/compaction.lua: what a server-side compaction does (remove whole units, or clear old tool
-- results), planned in memory first, then applied and recorded.
-- needs: items
--
-- A unit is a group (a tool call and its results: all or nothing) or one ungrouped item. A unit
-- with a pinned member is never removed; the keep_recent newest conversation units (a group, or
-- an ungrouped user or assistant message) are never removed or cleared.

local CONVERSATION = {user_message = true, assistant_message = true}

-- The items planning sees: stored ones (unless the window is new) and the ones this call added
-- (state.added), minus state.removed, with cleared tokens from state.cleared (id -> tokens).
local function window_items(state)
  local all, pinned = {}, {}
  if state.stored then
    for _, id in ipairs(redis.call('SMEMBERS', K_PINNED)) do pinned[id] = true end
    local flat = redis.call('HGETALL', K_ATTRS)
    for i = 1, #flat, 2 do
      local id = flat[i]
      if not state.removed[id] then
        local a = unpack_attrs(flat[i + 1])
        a.id, a.pinned = id, pinned[id] == true
        all[#all + 1] = a
      end
    end
  end
  for _, a in ipairs(state.added or {}) do
    if not state.removed[a.id] then all[#all + 1] = a end
  end
  for _, a in ipairs(all) do
    if state.cleared and state.cleared[a.id] then a.tokens, a.flags = state.cleared[a.id], 'c' end
  end
  return all
end

-- Units of `all`: {ids, items, tokens, seq (oldest), newest, priority (highest), pinned, group,
-- conversation}; the keep_recent newest conversation units are marked `kept`, and so are the
-- groups in `joining` (groups this call adds to).
local function units_of(all, keep_recent, joining)
  local by_key, units = {}, {}
  for _, a in ipairs(all) do
    local key = a.group ~= '' and ('g' .. a.group) or ('i' .. a.id)
    local u = by_key[key]
    if not u then
      u = {ids = {}, items = {}, tokens = 0, seq = a.seq, newest = a.seq, priority = a.priority,
        pinned = false, group = a.group, conversation = a.group ~= '' or CONVERSATION[a.type] == true}
      u.kept = (joining ~= nil and a.group ~= '' and joining[a.group]) == true
      by_key[key], units[#units + 1] = u, u
    end
    u.ids[#u.ids + 1], u.items[#u.items + 1] = a.id, a
    u.tokens = u.tokens + a.tokens
    u.seq, u.newest = math.min(u.seq, a.seq), math.max(u.newest, a.seq)
    u.priority = math.max(u.priority, a.priority)
    u.pinned = u.pinned or a.pinned
  end
  local conv = {}
  for _, u in ipairs(units) do
    if u.conversation then conv[#conv + 1] = u end
  end
  table.sort(conv, function(x, y) return x.newest > y.newest end)
  for i = 1, math.min(keep_recent or 0, #conv) do conv[i].kept = true end
  return units
end

-- Removable units in the order a strategy removes them: arrival order (remove_oldest), or
-- priority asc then arrival (bucketed by priority, 0..100, so only used buckets are sorted).
local function removal_order(strategy, units)
  local by_seq = function(x, y) return x.seq < y.seq end
  local cands = {}
  for _, u in ipairs(units) do
    if not u.pinned and not u.kept then cands[#cands + 1] = u end
  end
  if strategy == 'remove_oldest' then
    table.sort(cands, by_seq)
    return cands
  end
  local buckets, out = {}, {}
  for _, u in ipairs(cands) do
    local b = buckets[u.priority]
    if not b then b = {}; buckets[u.priority] = b end
    b[#b + 1] = u
  end
  for p = 0, MAX_PRIORITY do
    if buckets[p] then
      table.sort(buckets[p], by_seq)
      for _, u in ipairs(buckets[p]) do out[#out + 1] = u end
    end
  end
  return out
end

-- The tool a tool result answers (its call's tool name), from the result's decoded JSON.
local function tool_of(item)
  local meta = item.metadata
  local call = type(meta) == 'table' and meta.tool_call_id
  local entry = type(call) == 'string' and redis.call('HGET', K_CALLS, call)
  return entry and string.match(entry, ' (.*)$') or nil
end

-- Stored tool results that may be cleared, oldest first: not pinned, not cleared yet, not
-- kept, larger than the placeholder.
local function clearable(units, placeholder)
  local cands = {}
  for _, u in ipairs(units) do
    for _, a in ipairs(u.kept and {} or u.items) do
      if a.type == 'tool_result' and not a.new and not a.pinned and a.flags ~= 'c' and a.tokens > placeholder then
        cands[#cands + 1] = a
      end
    end
  end
  table.sort(cands, function(x, y) return x.seq < y.seq end)
  return cands
end

-- A candidate's cleared JSON, or nil when its tool is excluded or its JSON is not in the
-- stored layout (then it is left as it is).
local function cleared_version(a, cfg, placeholder)
  local json = redis.call('HGET', K_ITEMS, a.id)
  if next(cfg.excluded) and cfg.excluded[tool_of(cjson.decode(json)) or ''] then return nil end
  return cleared_json(json, a.tokens, placeholder)
end

-- Plan a compaction of `state`'s window from `tokens` down to `target`: a list of actions
-- ({'clear', item} or {'remove', unit}) of at most `limit` items, and the tokens they free.
-- clear_tool_results clears nothing unless that frees clear_at_least; with `fallback` it goes on
-- with remove_low_priority when clearing alone does not reach the target.
local function plan_compaction(strategy, tokens, target, state, cfg, placeholder, limit, fallback)
  local actions, freed, n = {}, 0, 0
  if tokens <= target then return actions, 0 end
  limit = limit or math.huge
  local all = window_items(state)
  if strategy == 'clear_tool_results' then
    local cleared = 0
    for _, a in ipairs(clearable(units_of(all, cfg.keep_recent, state.joining), placeholder)) do
      if tokens - cleared <= target or n >= limit then break end
      a.cleared_json = cleared_version(a, cfg, placeholder)
      if a.cleared_json then
        actions[#actions + 1], cleared, n = {'clear', a, a.tokens - placeholder}, cleared + a.tokens - placeholder, n + 1
      end
    end
    if cleared < cfg.clear_at_least then actions, cleared, n = {}, 0, 0 end
    for _, act in ipairs(actions) do act[2].tokens, act[2].flags = placeholder, 'c' end
    freed = cleared
    if not fallback then return actions, freed end
    strategy = 'remove_low_priority'
  end
  for _, u in ipairs(removal_order(strategy, units_of(all, cfg.keep_recent, state.joining))) do
    if tokens - freed <= target or n >= limit then break end
    actions[#actions + 1], freed, n = {'remove', u, u.tokens}, freed + u.tokens, n + #u.ids
  end
  return actions, freed
end

-- Apply planned actions; returns items removed, items cleared, tokens freed.
local function apply_compaction(actions, placeholder, reason)
  local cleared, freed, ids = 0, 0, {}
  for _, act in ipairs(actions) do
    if act[1] == 'clear' then
      freed = freed + clear_content(act[2].id, act[2].cleared_json, placeholder)
      cleared = cleared + 1
    else
      for _, id in ipairs(act[2].ids) do ids[#ids + 1] = id end
    end
  end
  freed = freed + remove_many(ids, reason or 'compaction')
  return #ids, cleared, freed
end

-- Record a compaction that removed or cleared something: counters and the `compacted` event.
-- continued: a later chunk of one compact() call (not counted as another compaction);
-- summary_id: the summary that replaced the removed items, if any.
local function record_compaction(strategy, removed_count, freed, before, max_tokens, continued, cleared_count,
                                 summary_id)
  if not continued then
    bump(F.COMPACTIONS, 1)
    RUN.compactions = RUN.compactions + 1
  end
  bump(F.FREED, freed)
  RUN.freed = RUN.freed + freed
  local after = meta_get(F.TOKENS)
  event('compacted', 'strategy', strategy, 'items_removed', fmt(removed_count),
    'items_cleared', fmt(cleared_count or 0), 'tokens_freed', fmt(freed),
    'usage_before_percent', pct(before, max_tokens), 'usage_after_percent', pct(after, max_tokens),
    'total_tokens_after', fmt(after), unpack((summary_id or '') ~= '' and {'summary_id', summary_id} or {}))
end
