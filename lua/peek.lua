-- peek.lua: a window's meta, and its running turn.
-- needs: reads
-- KEYS: meta, pinned, turn (of the window keys, lib/core.lua).
-- ARGV[1]: 'meta', or 'turn' for the :turn hash too.
-- Reply: {meta, pinned count, {}} (lib/reads.lua); for 'turn', in place of the items the :turn
-- hash as a flat field/value array (the running turn and the pending inputs), then the server's
-- time in ms.
local meta, npinned = window_head()
if not meta then return {{}, 0, {}} end
if ARGV[1] == 'turn' then return {meta, npinned, redis.call('HGETALL', K_TURN), now_ms()} end
if ARGV[1] ~= 'meta' then return fail('BADARG', 'mode') end
return {meta, npinned, {}}
