-- dump.lua: every key of a window as it is, for verify() (contextstore/core/verify.py).
-- needs: items
-- KEYS: the window keys (lib/core.lua). ARGV: none.
-- Reply: {meta, npinned, items, fifo, order, pinned, attrs, scores, groups, calls, ids with a
-- cached vector, turn, replies, archive, keys of another type} (scores: id -> the build-order
-- score its :attrs give; score() owns the formula). A key of another type than the scripts write
-- is named in the last list and read as empty.

-- the type each key of the window has when it exists, in KEYS order (lib/core.lua)
local KEY_TYPES = {'hash', 'hash', 'zset', 'list', 'set', 'hash', 'stream', 'list', 'hash', 'hash', 'hash', 'hash',
  'hash', 'string', 'hash'}
-- how verify() reads each key it checks, by its place in KEYS (:vectors: only its ids)
local WHOLE = {{'HGETALL'}, {'HGETALL'}, {'ZRANGE', 0, -1, 'WITHSCORES'}, {'LRANGE', 0, -1}, {'SMEMBERS'}, {'HGETALL'},
  [9] = {'HGETALL'}, [10] = {'HGETALL'}, [11] = {'HGETALL'}, [12] = {'HGETALL'}, [13] = {'HKEYS'}, [15] = {'HGETALL'}}

-- Every key as it is (the reply above).
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
return everything()
