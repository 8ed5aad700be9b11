-- pin.lua: pin or unpin one item.
-- needs: meta
-- KEYS: the window keys (lib/core.lua). A missing window is not made.
-- ARGV[1]: item id; ARGV[2]: '1' to pin, '0' to unpin.
-- Reply: 1 if the item exists (event only when its state changed), 0 if absent.
local cfg = stored_config()
if not cfg then return 0 end
local id, pin = ARGV[1], ARGV[2] == '1'
if redis.call('HEXISTS', K_ITEMS, id) == 0 then return 0 end
local was = redis.call('SISMEMBER', K_PINNED, id) == 1
if was == pin then return 1 end
new_epoch()
if pin then
  redis.call('SADD', K_PINNED, id)
  event('pinned', 'item_id', id, 'pinned', '1')
else
  redis.call('SREM', K_PINNED, id)
  event('unpinned', 'item_id', id, 'pinned', '0')
end
rearm_ttl(cfg)
return 1
