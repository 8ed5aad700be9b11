-- read.lua: one consistent read of a window (no writes, no TTL re-arm).
-- needs: archive
-- KEYS: the window keys (lib/core.lua).
-- ARGV[1]: the mode:
--   'fifo' (arrival order), 'order' (build order), 'pinned' (pinned, build order): ARGV[2] the
--     comma-separated types to keep ('' = all), ARGV[3] keep the last N (-1 = all);
--   'build' (the read of a build): ARGV[2] the epoch and ARGV[3] the last seq the client holds
--     (contextstore/core/itemcache.py): JSON is sent only for the items above it at that epoch;
--     ARGV[7] the item count the client holds: when the epoch, the seq and the count are all the
--     window's, the first page replies next = -2 and lists nothing (the client's listing holds);
--     when only adds happened since (every item the client holds is still there), it replies
--     next = -3 and lists the added ids alone, in arrival order;
--   for these four, ARGV[4] the index in :fifo or :order where this page of the listing starts,
--     ARGV[5] most ids per page (0 = all), ARGV[6] most bytes of JSON per reply (0 = any);
--   'fetch': ARGV[2] most bytes of JSON, ARGV[3..] ids: the JSON of the first of them that fit
--     (at least one; false for an id the window no longer holds);
--   'meta' (no items), 'get' (ARGV[2] = one id), 'archived' (ARGV[2] = a summary id: the items it
--     replaced, none when the archive has no unexpired entry for it), 'archive' (in place of item
--     JSON, every unexpired archive entry as "<summary id>=<server ms it expires>") or 'all'
--     (every key, raw: see below), 'turn' (in place of items, the :turn hash as a flat field/value
--     array, then the server's time in ms: the running turn and the pending inputs).
-- An item stored in a shape no script writes makes the reply {'!', 'CORRUPT', key, field, what}.
-- Reply: {meta as a flat field/value array (empty if the window does not exist), pinned count,
--         {item...}} (each {id, stored JSON, attrs, pinned 1/0}: raw_entry in lib/items.lua; the
--         client puts them together); the four listing modes add {listed id...}, {deferred id...}, next:
--         the JSON is that of the wanted ids (all listed ids, or for 'build' those the client
--         lacks) up to the byte limit, in listing order, and the rest of them are deferred (to
--         'fetch'); next is the index of the next page, -1 when the listing is complete. A
--         listing that takes several pages is consistent when every page's meta has the same
--         epoch, seq and item count (contextstore/plans/reads.py).

-- The entries of `ids` (raw_entry), in order, while their stored JSON fits `budget` bytes (0:
-- any; at least one is sent), read 64 at a time; returns the entries, the ids left over, and
-- the first id stored in a shape no script writes (nil if none).
local function contents(ids, budget)
  if budget <= 0 then
    local out, bad = raw_items(ids)
    return out, {}, bad
  end
  local out, used, wholes = {}, 0, whole_items(#ids)
  for i = 1, #ids, 64 do
    local chunk, bad = raw_items({unpack(ids, i, math.min(i + 63, #ids))}, wholes)
    if bad then return out, {}, bad end
    for j, e in ipairs(chunk) do
      local n = e and #e[2] or 0
      if #out > 0 and used + n > budget then
        local rest = {}
        for k = i + j - 1, #ids do rest[#rest + 1] = ids[k] end
        return out, rest, nil
      end
      used, out[#out + 1] = used + n, e
    end
  end
  return out, {}, nil
end

-- where the page after this one starts, -1 when this one ends the listing
local function next_page(first, page, total)
  return (page > 0 and first + page < total) and first + page or -1
end

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

-- the type each key of the window has when it exists, in KEYS order (lib/core.lua)
local KEY_TYPES = {'hash', 'hash', 'zset', 'list', 'set', 'hash', 'stream', 'list', 'hash', 'hash', 'hash', 'hash',
  'hash', 'string', 'hash'}
-- how verify() reads each key it checks, by its place in KEYS (:vectors: only its ids)
local WHOLE = {{'HGETALL'}, {'HGETALL'}, {'ZRANGE', 0, -1, 'WITHSCORES'}, {'LRANGE', 0, -1}, {'SMEMBERS'}, {'HGETALL'},
  [9] = {'HGETALL'}, [10] = {'HGETALL'}, [11] = {'HGETALL'}, [12] = {'HGETALL'}, [13] = {'HKEYS'}, [15] = {'HGETALL'}}

-- Every key as it is, for verify(): {meta, npinned, items, fifo, order, pinned, attrs, scores,
-- groups, calls, ids with a cached vector, turn, replies, archive, keys of another type}
-- (scores: id -> the build-order score its :attrs give; score() owns the formula). A key of
-- another type than the scripts write is named in the last list and read as empty.
local function everything()
  local got, wrong = {}, {}
  for i, k in ipairs(KEYS) do
    local kind = redis.call('TYPE', k).ok
    if kind ~= 'none' and kind ~= KEY_TYPES[i] then wrong[#wrong + 1] = k end
    local how = WHOLE[i]
    got[i] = (how and kind == KEY_TYPES[i]) and redis.call(how[1], k, unpack(how, 2)) or {}
  end
  local attrs, scores = got[6], {}
  for i = 1, #attrs, 2 do
    local a = parse_attrs(attrs[i + 1])
    if a then
      scores[#scores + 1] = attrs[i]
      scores[#scores + 1] = score(a.type, a.priority, a.seq)
    end
  end
  return {got[1], #got[5], got[2], got[4], got[3], got[5], attrs, scores, got[10], got[11], got[13], got[15], got[9],
    got[12], wrong}
end

-- main: the call (the helpers above are defined once per library load; see drivers/scripts.py)
if ARGV[1] == 'all' then return everything() end
local meta = redis.call('HGETALL', K_META)
if #meta == 0 then return {{}, 0, {}} end
local mode = ARGV[1]
local npinned = redis.call('SCARD', K_PINNED)
if mode == 'meta' then return {meta, npinned, {}} end
if mode == 'turn' then return {meta, npinned, redis.call('HGETALL', K_TURN), now_ms()} end
if mode == 'archived' then
  local out = {}
  for i, row in ipairs(archive_get(ARGV[2]) or {}) do out[i] = archived_entry(row, ARGV[2]) end
  return {meta, npinned, out}
end
if mode == 'archive' then return {meta, npinned, archive_index()} end
if mode == 'get' then
  local found, bad = raw_items({ARGV[2]})
  if bad then return fail('CORRUPT', K_ATTRS, bad, 'missing') end
  return {meta, npinned, found[1] and found or {}}
end

if mode == 'fetch' then
  local out, _, bad = contents({unpack(ARGV, 3)}, tonumber(ARGV[2]) or 0)
  if bad then return fail('CORRUPT', K_ATTRS, bad, 'missing') end
  return {meta, npinned, out}
end

local first, page, budget = tonumber(ARGV[4]) or 0, tonumber(ARGV[5]) or 0, tonumber(ARGV[6]) or 0
local last = page > 0 and first + page - 1 or -1
local listed, wanted, total = {}, nil, 0

if mode == 'build' then
  -- every id in build order; wanted: those with a seq above ARGV[3] when ARGV[2] is the
  -- window's epoch, else all of them
  local stamp = {}
  for i = 1, #meta, 2 do stamp[meta[i]] = meta[i + 1] end
  local known = (ARGV[2] ~= '' and ARGV[2] == stamp[F.EPOCH]) and tonumber(ARGV[3]) or -1
  if first == 0 and known >= 0 and ARGV[7] then
    if ARGV[3] == stamp[F.SEQ] and ARGV[7] == stamp[F.ITEMS] then return {meta, npinned, {}, {}, {}, -2} end
    local added = appended(known, tonumber(ARGV[7]))
    if added then
      local out, deferred, bad = contents(added, budget)
      if bad then return fail('CORRUPT', K_ATTRS, bad, 'missing') end
      return {meta, npinned, out, added, deferred, -3}
    end
  end
  local order = redis.call('ZRANGE', K_ORDER, first, last, 'WITHSCORES')
  wanted = {}
  list_newer(order, known, listed, wanted)
  total = page > 0 and redis.call('ZCARD', K_ORDER) or 0
else
  local limit = tonumber(ARGV[3]) or -1
  if mode == 'fifo' then
    total = redis.call('LLEN', K_FIFO)
    if ARGV[2] == '' and limit >= 0 and first == 0 then first = math.max(0, total - limit) end
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
  if ARGV[2] ~= '' and #listed > 0 then
    local types = {}
    for t in string.gmatch(ARGV[2], '[^,]+') do types[t] = true end
    local keep = {}
    for i = 1, #listed, 500 do
      local chunk = redis.call('HMGET', K_ATTRS, unpack(listed, i, math.min(i + 499, #listed)))
      for j = 1, #chunk do
        if chunk[j] and types[unpack_attrs(chunk[j], listed[i + j - 1]).type] then keep[#keep + 1] = listed[i + j - 1] end
      end
    end
    listed = keep
  end
  if tonumber(ARGV[4]) == 0 and (page == 0 or first + page >= total) then
    -- the whole listing in this call: cut to the last N here
    if limit >= 0 and #listed > limit then
      local cut = {}
      for i = #listed - limit + 1, #listed do cut[#cut + 1] = listed[i] end
      listed = cut
    end
    wanted = listed
  else  -- a listing of several pages is cut by the client, and its JSON fetched then
    return {meta, npinned, {}, listed, listed, next_page(first, page, total)}
  end
end
local out, deferred, bad = contents(wanted, budget)
if bad then return fail('CORRUPT', K_ATTRS, bad, 'missing') end
return {meta, npinned, out, listed, deferred, next_page(first, page, total)}
