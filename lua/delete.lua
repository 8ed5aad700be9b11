-- delete.lua: delete every key of a window but its request log. KEYS: the window keys (lib/core.lua).
-- needs: core
-- Reply: 1 if the window existed, else 0.
local existed = redis.call('EXISTS', K_META)
if existed == 1 then WROTE = true end
redis.call('DEL', unpack(ALL_KEYS))
return existed
