-- stage.lua: stage a part of a big restore's (or fork's) items in keys of their own, which no read
-- sees, so that restore.lua writes a window of any size in calls of bounded size and the window
-- appears whole, in one step.
-- needs: rows
-- KEYS: meta, items, order, fifo, pinned, attrs, groups, calls, blobs, sizes (of the window keys,
--   lib/core.lua): those of the staging (contextstore/core/keys.py staged_keys), under the
--   window's hash tag.
-- ARGV[1]: how many items were staged before this part, or 'drop' (remove the staged keys: a
--   restore refused after staging); ARGV[2]: n; then the n items' rows, packed as restore.lua
--   takes them (lib/rows.lua), in seq order, after every seq staged before.
-- The staged :meta holds what is staged: F.ITEMS, F.TOKENS and the per-type counters, F.SEQ the
-- largest seq. Every staged key expires STAGE_TTL_MS after the last part, so a client that stops
-- midway leaves nothing behind for long.
-- Reply: the number of items staged after this part. A part staged already (a retry of the
-- restore, whose request names the staging) is not staged again; one that does not follow what
-- is staged, or is malformed, is refused
-- ({'!', 'BADARG', what}), nothing written.
local STAGED = {K_META, K_ITEMS, K_ORDER, K_FIFO, K_PINNED, K_ATTRS, K_GROUPS, K_CALLS, K_BLOBS, K_SIZES}
if ARGV[1] == 'drop' then
  redis.call('UNLINK', unpack(STAGED))
  return 0
end
local before, n = tonumber(ARGV[1]), tonumber(ARGV[2])
if not is_int(before, 0, MAX_ITEM_LIMIT) or not is_int(n, 1, MAX_ITEM_LIMIT) then return fail('BADARG', 'part') end
local counts = {}
local stored = redis.call('HGETALL', K_META)
for i = 1, #stored, 2 do counts[stored[i]] = stored_int(K_META, stored[i], stored[i + 1], 0, 1e15) end
local staged, last_seq = counts[F.ITEMS] or 0, counts[F.SEQ] or 0
counts[F.SEQ] = nil
if staged >= before + n then return staged end  -- staged already: a retry of this restore
if staged ~= before or before + n > MAX_ITEM_LIMIT then return fail('BADARG', 'part') end
local items, max_seq, after = restored_rows(3, n, K_ITEMS)
if not items then return fail('BADARG', max_seq) end
if after ~= #ARGV + 1 then return fail('BADARG', 'arity') end
if items[1].seq <= last_seq then return fail('BADARG', 'seq order') end
store_restored(items, counts)
local pairs_out = {F.SEQ, fmt(max_seq)}
for field, value in pairs(counts) do pairs_out[#pairs_out + 1], pairs_out[#pairs_out + 2] = field, fmt(value) end
redis.call('HSET', K_META, unpack(pairs_out))
for _, k in ipairs(STAGED) do redis.call('PEXPIRE', k, STAGE_TTL_MS) end
return before + n
