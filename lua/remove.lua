-- remove.lua: remove one item (reason "manual").
-- needs: items
-- KEYS: the nine window keys. ARGV[1..6]: caller config (unused: a missing window is not made).
-- ARGV[7]: item id. Reply: 1 if it was removed, 0 if absent.
local cfg = read_config()
if cfg == nil or cfg.new then return 0 end
if redis.call('HEXISTS', K_ATTRS, ARGV[7]) == 0 then return 0 end
remove_many({ARGV[7]}, 'manual')
rearm_ttl(cfg)
return 1
