-- dump.lua: every key of a window as it is, for verify() (contextstore/core/verify.py).
-- needs: items
-- KEYS: the window keys (lib/core.lua).
-- ARGV: none: every key at once, the reply below. Or one part of it, so that no call holds the
-- shard long however large the window (contextstore/plans/window.py puts the parts together):
-- ARGV[1] 'head': the reply below with its six largest keys (:items, :fifo, :order, :pinned,
-- :attrs, :sizes) left empty; or ARGV[1] one of those six names, ARGV[2] a cursor ('0' to start: SCAN's
-- for the hashes and the set, an index for the list and the sorted set), ARGV[3] how many
-- entries: reply {stamp, next cursor ('0' when done), entries (a hash's as field/value pairs,
-- :order's and :sizes' as id/score), scores (for 'attrs': the entries' build-order scores, id/score)}; the
-- stamp (epoch, seq, item count) tells the caller whether the window changed between parts.
-- Reply: {meta, npinned, items, fifo, order, pinned, attrs, scores, groups, calls, ids with a
-- cached vector, turn, replies, archive, keys of another type, blob counts, sizes} (scores: id -> the build-order
-- score its :attrs give; score() owns the formula). A key of another type than the scripts write
-- is named in the last list and read as empty.

-- the type each key of the window has when it exists, in KEYS order (lib/core.lua)
local KEY_TYPES = {'hash', 'hash', 'zset', 'list', 'set', 'hash', 'stream', 'list', 'hash', 'hash', 'hash', 'hash',
  'hash', 'string', 'hash', 'hash', 'zset'}
-- how verify() reads each key it checks, by its place in KEYS (:vectors: only its ids)
local WHOLE = {{'HGETALL'}, {'HGETALL'}, {'ZRANGE', 0, -1, 'WITHSCORES'}, {'LRANGE', 0, -1}, {'SMEMBERS'}, {'HGETALL'},
  [9] = {'HGETALL'}, [10] = {'HGETALL'}, [11] = {'HGETALL'}, [12] = {'HGETALL'}, [13] = {'HKEYS'}, [15] = {'HGETALL'},
  [16] = {'HGETALL'}, [17] = {'ZRANGE', 0, -1, 'WITHSCORES'}}

-- the keys a part read pages through, by their place in KEYS
local PARTS = {items = 2, order = 3, fifo = 4, pinned = 5, attrs = 6, sizes = 17}

-- The build-order score of each id/attrs pair of `attrs` that parses, as id/score pairs.
local function scores_of(attrs)
  local scores = {}
  for i = 1, #attrs, 2 do
    local a = parse_attrs(attrs[i + 1])
    if a then
      scores[#scores + 1] = attrs[i]
      scores[#scores + 1] = score(a.type, a.priority, a.seq)
    end
  end
  return scores
end

-- Every key as it is (the reply above); with `head`, the six keys PARTS names left empty.
local function everything(head)
  local got, wrong, paged = {}, {}, {}
  if head then for _, i in pairs(PARTS) do paged[i] = true end end
  for i, k in ipairs(KEYS) do
    local kind = redis.call('TYPE', k).ok
    if kind ~= 'none' and kind ~= KEY_TYPES[i] then wrong[#wrong + 1] = k end
    local how = WHOLE[i]
    got[i] = (how and kind == KEY_TYPES[i] and not paged[i]) and redis.call(how[1], k, unpack(how, 2)) or {}
  end
  local npinned = head and redis.call('SCARD', K_PINNED) or #got[5]
  return {got[1], npinned, got[2], got[4], got[3], got[5], got[6], scores_of(got[6]), got[10], got[11], got[13],
    got[15], got[9], got[12], wrong, got[16], got[17]}
end

-- One page of the key PARTS names `part`, from `cursor`, about `count` entries (the reply above).
local function part(name, cursor, count)
  local i = PARTS[name]
  if not i then return fail('BADARG', 'part') end
  local k = KEYS[i]
  local stamp = redis.call('HMGET', K_META, F.EPOCH, F.SEQ, F.ITEMS)
  if redis.call('TYPE', k).ok ~= KEY_TYPES[i] then return {stamp, '0', {}, {}} end
  local nxt, entries
  if name == 'fifo' or name == 'order' or name == 'sizes' then
    local first = tonumber(cursor)
    if name == 'fifo' then
      entries = redis.call('LRANGE', k, first, first + count - 1)
    else
      entries = redis.call('ZRANGE', k, first, first + count - 1, 'WITHSCORES')
    end
    local got = name == 'fifo' and #entries or #entries / 2
    nxt = got < count and '0' or tostring(first + count)
  else
    local scan
    if name == 'pinned' then
      scan = redis.call('SSCAN', k, cursor, 'COUNT', count)
    else
      scan = redis.call('HSCAN', k, cursor, 'COUNT', count)
    end
    nxt, entries = scan[1], scan[2]
  end
  return {stamp, nxt, entries, name == 'attrs' and scores_of(entries) or {}}
end

-- main: the call (the helpers above are defined once per library load; see drivers/scripts.py)
if ARGV[1] == nil or ARGV[1] == 'head' then return everything(ARGV[1] == 'head') end
return part(ARGV[1], ARGV[2], tonumber(ARGV[3]))
