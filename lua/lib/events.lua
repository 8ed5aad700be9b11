-- lib/events.lua: the window's event stream (one entry per change, trimmed MAXLEN ~).
-- needs: core

local function event(name, ...)
  WROTE = true
  redis.call('XADD', K_EVENTS, 'MAXLEN', '~', STREAM_MAXLEN, '*', 'event', name, ...)
end
