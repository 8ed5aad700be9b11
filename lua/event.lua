-- event.lua: append an event that is not a mutation (``built``) to a live window's stream.
-- needs: events
-- KEYS: meta, events (of the window keys, lib/core.lua).
-- ARGV[1]: n, how many meta fields the window must hold as
--   given (0: none); ARGV[2..2n+1]: those field/value pairs ('' stands for a missing field): a
--   build from the client's cache or from the facts names what it built from (plans/build.py,
--   plans/chat.py); then the event
--   name, then its field/value pairs.
-- The stream takes the window's remaining TTL; reads never re-arm it. Reply: 1, 0 if the window
-- does not exist, -1 if a named meta field holds another value (for both, nothing is written).
local n = tonumber(ARGV[1])
if not n or n < 0 or #ARGV < 2 * n + 2 then return fail('BADARG', 'event') end
local fields = {F.EVENTS_MAXLEN}
for i = 1, n do fields[i + 1] = ARGV[2 * i] end
local m = redis.call('HMGET', K_META, unpack(fields))
if not m[1] and redis.call('EXISTS', K_META) == 0 then return 0 end
for i = 1, n do
  if (m[i + 1] or '') ~= ARGV[2 * i + 1] then return -1 end
end
CFG = {events_maxlen = tonumber(m[1]) or STREAM_MAXLEN}
event(unpack(ARGV, 2 * n + 2))
local pttl = redis.call('PTTL', K_META)
if pttl > 0 then redis.call('PEXPIRE', K_EVENTS, pttl) end
return 1
