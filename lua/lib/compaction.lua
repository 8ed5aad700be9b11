-- lib/compaction.lua: choosing what a server-side compaction removes, and recording it.
-- needs: items

-- Unpinned items not already planned away: the stored ones (unless the window is new) and
-- `extra`, items this call added in memory. removed: ids already gone in this call's plan.
local function compaction_candidates(removed, extra, stored)
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
  return cands
end

-- Candidates in the order the strategy removes them: arrival order (remove_oldest), or
-- priority asc then arrival (remove_low_priority: priority is 0..100, so bucket by it and sort
-- only the buckets that are used).
local function removal_order(strategy, cands)
  local by_seq = function(x, y) return x.seq < y.seq end
  if strategy == 'remove_oldest' then
    table.sort(cands, by_seq)
    return cands
  end
  local buckets, out = {}, {}
  for _, a in ipairs(cands) do
    local b = buckets[a.priority]
    if not b then b = {}; buckets[a.priority] = b end
    b[#b + 1] = a
  end
  for p = 0, MAX_PRIORITY do
    local b = buckets[p]
    if b then
      table.sort(b, by_seq)
      for _, a in ipairs(b) do out[#out + 1] = a end
    end
  end
  return out
end

-- What a server-side compaction removes to bring `tokens` down to `target`: {ids}, freed.
-- limit: at most this many ids (nil = no limit).
local function plan_compaction(strategy, tokens, target, removed, extra, stored, limit)
  if tokens <= target then return {}, 0 end
  local ids, freed = {}, 0
  for _, a in ipairs(removal_order(strategy, compaction_candidates(removed, extra, stored))) do
    if tokens - freed <= target or #ids >= (limit or math.huge) then break end
    ids[#ids + 1] = a.id
    freed = freed + a.tokens
  end
  return ids, freed
end

-- Record a compaction that removed something: counters and the `compacted` event.
-- continued: a later chunk of one compact() call (not counted as another compaction).
local function record_compaction(strategy, removed_count, freed, before, max_tokens, continued)
  if not continued then bump(F.COMPACTIONS, 1) end
  bump(F.FREED, freed)
  local after = meta_get(F.TOKENS)
  event('compacted', 'strategy', strategy, 'items_removed', fmt(removed_count),
    'tokens_freed', fmt(freed), 'usage_before_percent', pct(before, max_tokens),
    'usage_after_percent', pct(after, max_tokens), 'total_tokens_after', fmt(after))
end
