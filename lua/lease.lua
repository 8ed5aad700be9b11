-- lease.lua: the compactor lease of a window, so that one compactor at a time works on it.
-- needs: core
-- KEYS: lease (of the window keys, lib/core.lua).
-- ARGV[1]: 'acquire' (take the lease for ARGV[3] ms if it is free or already ARGV[2]'s, which
--   extends it) or 'release' (drop it if it is ARGV[2]'s). ARGV[2]: the compactor's token.
-- Reply: 1 when ARGV[2] holds the lease (acquire) or dropped it (release), else 0.
local op, token = ARGV[1], ARGV[2]
if op == 'acquire' then
  local ms = tonumber(ARGV[3])
  if not is_int(ms, 1, 1e12) then return fail('BADARG', 'lease ms') end
  local holder = redis.call('GET', K_LEASE)
  if holder and holder ~= token then return 0 end
  redis.call('SET', K_LEASE, token, 'PX', ms)
  return 1
elseif op == 'release' then
  if redis.call('GET', K_LEASE) ~= token then return 0 end
  redis.call('DEL', K_LEASE)
  return 1
end
return fail('BADARG', 'lease op')
