-- lib/events.lua: the window's event stream (one entry per change, trimmed MAXLEN ~).
-- needs: core

-- Append an event; the stream is trimmed to about the window's events_maxlen entries.
local function event(name, ...)
  WROTE = true
  local maxlen = CFG and CFG.events_maxlen or STREAM_MAXLEN
  redis.call('XADD', K_EVENTS, 'MAXLEN', '~', maxlen, '*', 'event', name, ...)
end
