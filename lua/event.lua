-- event.lua: append an event that is not a mutation (``built``) to a live window's stream.
-- needs: events
-- KEYS: the eleven window keys. ARGV: event name, then field/value pairs.
-- The stream takes the window's remaining TTL; reads never re-arm it. Reply: 1, or 0 if the
-- window does not exist (then nothing is written).
if redis.call('EXISTS', K_META) == 0 then return 0 end
event(unpack(ARGV))
local pttl = redis.call('PTTL', K_META)
if pttl > 0 then redis.call('PEXPIRE', K_EVENTS, pttl) end
return 1
