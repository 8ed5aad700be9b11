-- pop.lua: remove and return the newest items in arrival order (reason "manual"), pinned or not.
-- needs: items
-- KEYS: the window keys (lib/core.lua). A missing window is not made.
-- ARGV[1]: how many (1 or more).
-- Reply: their entries (lib/items.lua raw_entry), newest first ({} when the window is empty or missing).
local cfg = stored_config()
local n = tonumber(ARGV[1])
if not is_int(n, 1, MAX_ITEM_LIMIT) then return fail('BADARG', 'count') end
if not cfg then return {} end
local ids = redis.call('LRANGE', K_FIFO, -n, -1)
if #ids == 0 then return {} end
local newest_first = {}
for i = #ids, 1, -1 do newest_first[#newest_first + 1] = ids[i] end
local out, bad = raw_items(newest_first)
if bad then return fail('CORRUPT', K_ATTRS, bad, 'missing') end
for i, e in ipairs(out) do  -- the client decodes them after they are gone: check them now
  if not e then corrupt(K_ITEMS, newest_first[i], 'missing') end
  check_body(e[1], e[2])
  unpack_attrs(e[3], e[1])
end
remove_many(ids, 'manual')
bump(F.REMOVED_BY_CALLER, 1)
rearm_ttl(cfg)
return out
