-- list.lua: one page of a listing of a window's items, with the JSON of those that fit.
-- needs: reads
-- KEYS: meta, items, order, fifo, pinned, attrs (of the window keys, lib/core.lua).
-- ARGV[1]: the order: 'fifo' (arrival), 'order' (build order), 'pinned' (pinned, build order) or
-- 'after' (arrival, from the first item with a seq above ARGV[4]); ARGV[2]: the comma-separated
-- types to keep ('' = all); ARGV[3]: keep the last N (-1 = all); ARGV[4]: the index in :fifo or
-- :order where this page starts ('after': the seq); ARGV[5]: most ids per page (0 = all);
-- ARGV[6]: most bytes of JSON per reply (0 = any).
-- Reply: {meta, pinned count, {item...}, {listed id...}, {deferred id...}, next} (lib/reads.lua):
-- a listing whole in this call is cut to the last N here and its JSON sent up to the byte limit,
-- the rest deferred (to fetch.lua); a listing of several pages sends ids only, every one deferred,
-- and the client cuts it. next: the index of the next page ('after': the seq of the last id this
-- page looked at, each page sending its JSON), -1 when the listing is complete. A listing of
-- several pages is consistent when every page's meta has the same epoch, seq and item count
-- (contextstore/plans/reads.py). {'!', 'CORRUPT', key, id, 'missing'} for a listed id without
-- its attrs or its JSON.

-- The seq of the item at index `at` of :fifo (corrupt() when its attrs are missing or bad).
local function seq_at(at)
  local id = redis.call('LINDEX', K_FIFO, at)
  return unpack_attrs(redis.call('HGET', K_ATTRS, id), id).seq
end

-- The index in :fifo of the first item with a seq above `seq` (`total` when none): a bisection
-- (:fifo is in strictly increasing seq order), O(log n) LINDEX and HGET calls.
local function first_after(seq, total)
  local lo, hi = 0, total
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if seq_at(mid) <= seq then lo = mid + 1 else hi = mid end
  end
  return lo
end
local meta, npinned = window_head()
if not meta then return {{}, 0, {}} end
local mode, types_arg, limit = ARGV[1], ARGV[2], tonumber(ARGV[3]) or -1
local start, page, budget = tonumber(ARGV[4]) or 0, tonumber(ARGV[5]) or 0, tonumber(ARGV[6]) or 0
local first = start
local last = page > 0 and first + page - 1 or -1
local listed, total
if mode == 'fifo' then
  total = redis.call('LLEN', K_FIFO)
  if types_arg == '' and limit >= 0 and first == 0 then first = math.max(0, total - limit) end
  last = page > 0 and first + page - 1 or -1
  listed = redis.call('LRANGE', K_FIFO, first, last)
elseif mode == 'after' then
  total = redis.call('LLEN', K_FIFO)
  first = start > 0 and first_after(start, total) or 0
  last = page > 0 and first + page - 1 or -1
  listed = redis.call('LRANGE', K_FIFO, first, last)
elseif mode == 'order' or mode == 'pinned' then
  total = redis.call('ZCARD', K_ORDER)
  listed = redis.call('ZRANGE', K_ORDER, first, last)
else
  return fail('BADARG', 'mode')
end
if mode == 'pinned' then
  local keep = {}
  for _, id in ipairs(listed) do
    if redis.call('SISMEMBER', K_PINNED, id) == 1 then keep[#keep + 1] = id end
  end
  listed = keep
end
local cursor = -1  -- 'after': the seq of the last id looked at, when more follow
if mode == 'after' and #listed > 0 and first + #listed < total then cursor = seq_at(first + #listed - 1) end
if types_arg ~= '' and #listed > 0 then
  local types = {}
  for t in string.gmatch(types_arg, '[^,]+') do types[t] = true end
  local keep = {}
  for i = 1, #listed, 500 do
    local chunk = redis.call('HMGET', K_ATTRS, unpack(listed, i, math.min(i + 499, #listed)))
    for j = 1, #chunk do
      if chunk[j] and types[unpack_attrs(chunk[j], listed[i + j - 1]).type] then keep[#keep + 1] = listed[i + j - 1] end
    end
  end
  listed = keep
end
-- The first listed id without its JSON: listed by this call, it did not go meanwhile (as
-- between a listing and fetch.lua), so the window holds what no script writes.
local function bodiless(out)
  for i, e in ipairs(out) do
    if not e then return listed[i] end
  end
  return nil
end

if mode == 'after' then
  local out, deferred, bad = contents(listed, budget)
  if bad then return fail('CORRUPT', K_ATTRS, bad, 'missing') end
  local gone = bodiless(out)
  if gone then return fail('CORRUPT', K_ITEMS, gone, 'missing') end
  return {meta, npinned, out, listed, deferred, cursor}
end
if start ~= 0 or (page > 0 and first + page < total) then
  -- a listing of several pages is cut by the client, and its JSON fetched then
  return {meta, npinned, {}, listed, listed, next_page(first, page, total)}
end
if limit >= 0 and #listed > limit then  -- the whole listing in this call: cut to the last N here
  local cut = {}
  for i = #listed - limit + 1, #listed do cut[#cut + 1] = listed[i] end
  listed = cut
end
local out, deferred, bad = contents(listed, budget)
if bad then return fail('CORRUPT', K_ATTRS, bad, 'missing') end
local gone = bodiless(out)
if gone then return fail('CORRUPT', K_ITEMS, gone, 'missing') end
return {meta, npinned, out, listed, deferred, next_page(first, page, total)}
