-- turn.lua: renew or end a turn (a turn begins with its first add: add.lua, lib/turns.lua).
-- needs: turns
-- KEYS: the window keys (lib/core.lua); :turn and :events are written.
-- ARGV[1]: 'renew' (extend the lease of turn ARGV[2] by ARGV[3] ms from now: 1, or
--   {'!', 'TURNLOST', why} when it no longer holds it) or 'end' (end turn ARGV[2] with outcome
--   ARGV[3], 'ok' or 'error').
-- Reply: renew: 1, or {'!', 'TURNLOST', why}; end: {1, or 0 when it no longer held the lease, pending
--   inputs left}.
local op, token, arg = ARGV[1], ARGV[2], ARGV[3]
if not token or not string.match(token, '^%x+$') then return fail('BADARG', 'turn token') end
if redis.call('EXISTS', K_META) == 0 then  -- deleted or expired: no turn, nothing to write
  return op == 'end' and {0, 0} or fail('TURNLOST', 'window gone')
end
stored_config()
if op == 'renew' then
  local lease = tonumber(arg)
  if not is_int(lease, 1, 86400000) then return fail('BADARG', 'lease ms') end
  return renew_turn(token, lease)
elseif op == 'end' then
  if arg ~= 'ok' and arg ~= 'error' then return fail('BADARG', 'outcome') end
  return end_turn(token, arg)
end
return fail('BADARG', 'turn op')
