-- remove.lua: remove one item (reason "manual").
-- needs: items
-- KEYS: the window keys (lib/core.lua). A missing window is not made.
-- ARGV[1]: item id. Reply: 1 if it was removed, 0 if absent.
local cfg = stored_config()
if not cfg then return 0 end
local id = ARGV[1]
if redis.call('HEXISTS', K_ATTRS, id) == 0 then return 0 end
remove_many({id}, 'manual')
bump(F.REMOVED_BY_CALLER, 1)
rearm_ttl(cfg)
return 1
