-- build_read.lua: one page of the read of a build: every id in build order, with the JSON of
-- those the client's cache lacks (contextstore/core/itemcache.py).
-- needs: reads
-- KEYS: meta, items, order, fifo, pinned, attrs (of the window keys, lib/core.lua).
-- ARGV[1]: the epoch and ARGV[2] the last seq the client holds ('' and -1: none): JSON is sent
-- only for the items above that seq, and only when the epoch is the window's (else for all);
-- ARGV[3]: the index in :order where this page starts; ARGV[4]: most ids per page (0 = all);
-- ARGV[5]: most bytes of JSON per reply (0 = any); ARGV[6] (optional): the item count the client
-- holds: when the epoch, the seq and the count are all the window's, the first page replies
-- next = -2 and lists nothing (the client's listing holds); when only adds happened since (every
-- item the client holds is still there), it replies next = -3 and lists the added ids alone, in
-- arrival order.
-- Reply: {meta, pinned count, {item...}, {listed id...}, {deferred id...}, next} (lib/reads.lua):
-- the JSON of the wanted ids up to the byte limit, in listing order, the rest of them deferred (to
-- fetch.lua); next: the index of the next page, -1 when the listing is complete.
-- most added ids a build read lists on their own (more: the whole listing)
local APPENDED_MAX = 512

-- Whether item `id`'s seq is at most `known` (nil when :order lacks it).
local function seq_at_most(id, known)
  local s = redis.call('ZSCORE', K_ORDER, id)
  if not s then return nil end
  return seq_of(s) <= known
end

-- The ids added after seq `known`, oldest first, when the window holds `count` items besides
-- them (nothing older went); else nil. They are the k newest ids of :fifo (k: the items the window
-- holds beyond `count`) when the id before them is not above that seq: :fifo is in strictly
-- increasing seq order (verify() checks it; removals bisect on it), and within an epoch an item
-- above the seq is always a new one (a script that brings back a seq already handed out starts a
-- new epoch), so that one score settles all k. One LRANGE and one ZSCORE, not a ZSCORE per id
-- (a zset of up to 128 items is a listpack, where each is a scan).
local function appended(known, count)
  local k = redis.call('ZCARD', K_ORDER) - count
  if k < 0 or k > APPENDED_MAX then return nil end
  local tail = redis.call('LRANGE', K_FIFO, -(k + 1), -1)
  if #tail < k then return nil end
  local first = #tail - k + 1  -- the oldest added id; the one before it, if any, is the newest known
  if first > 1 and not seq_at_most(tail[first - 1], known) then return nil end
  return {unpack(tail, first)}
end

-- main: the call (the helpers above are defined once per library load; see drivers/scripts.py)
local meta, npinned = window_head()
if not meta then return {{}, 0, {}} end
local first, page, budget = tonumber(ARGV[3]) or 0, tonumber(ARGV[4]) or 0, tonumber(ARGV[5]) or 0
local stamp = {}
for i = 1, #meta, 2 do stamp[meta[i]] = meta[i + 1] end
local known = (ARGV[1] ~= '' and ARGV[1] == stamp[F.EPOCH]) and tonumber(ARGV[2]) or -1
if first == 0 and known >= 0 and ARGV[6] then
  if ARGV[2] == stamp[F.SEQ] and ARGV[6] == stamp[F.ITEMS] then return {meta, npinned, {}, {}, {}, -2} end
  local added = appended(known, tonumber(ARGV[6]))
  if added then
    local out, deferred, bad = contents(added, budget)
    if bad then return fail('CORRUPT', K_ATTRS, bad, 'missing') end
    return {meta, npinned, out, added, deferred, -3}
  end
end
local order = redis.call('ZRANGE', K_ORDER, first, page > 0 and first + page - 1 or -1, 'WITHSCORES')
local listed, wanted = {}, {}
list_newer(order, known, listed, wanted)
local total = page > 0 and redis.call('ZCARD', K_ORDER) or 0
local out, deferred, bad = contents(wanted, budget)
if bad then return fail('CORRUPT', K_ATTRS, bad, 'missing') end
return {meta, npinned, out, listed, deferred, next_page(first, page, total)}
