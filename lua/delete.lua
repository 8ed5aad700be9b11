-- delete.lua: delete every key of a window. KEYS: the seven window keys.
-- Reply: 1 if the window existed, else 0.
local existed = redis.call('EXISTS', K_META)
redis.call('DEL', unpack(ALL_KEYS))
return existed
