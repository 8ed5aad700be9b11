-- event.lua: append an event that is not a mutation (``built``) to a live window's stream.
-- needs: events
-- KEYS: the window keys (lib/core.lua). ARGV: event name, then field/value pairs.
-- The stream takes the window's remaining TTL; reads never re-arm it. Reply: 1, or 0 if the
-- window does not exist (then nothing is written).
local maxlen = redis.call('HGET', K_META, F.EVENTS_MAXLEN)
if not maxlen and redis.call('EXISTS', K_META) == 0 then return 0 end
CFG = {events_maxlen = tonumber(maxlen) or STREAM_MAXLEN}
event(unpack(ARGV))
local pttl = redis.call('PTTL', K_META)
if pttl > 0 then redis.call('PEXPIRE', K_EVENTS, pttl) end
return 1
