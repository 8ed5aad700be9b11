-- priority.lua: change one item's priority (its build-order score follows).
-- needs: items
-- KEYS: the window keys (lib/core.lua). A missing window is not made.
-- ARGV[1]: item id; ARGV[2]: new priority 0-100.
-- Reply: 1 if the item exists (event only when the value changed), 0 if absent.
local cfg = stored_config()
local p = tonumber(ARGV[2])
if not is_int(p, 0, MAX_PRIORITY) then return fail('BADARG', 'priority') end
if not cfg then return 0 end
local id = ARGV[1]
local packed = redis.call('HGET', K_ATTRS, id)
if not packed then return 0 end
local a = unpack_attrs(packed, id)
local old = a.priority
if old == p then return 1 end
a.priority = p
new_epoch()
redis.call('HSET', K_ATTRS, id, pack_attrs(a))
redis.call('ZADD', K_ORDER, score(a.type, p, a.seq), id)
event('priority_changed', 'item_id', id, 'priority', fmt(p), 'previous_priority', fmt(old))
rearm_ttl(cfg)
return 1
