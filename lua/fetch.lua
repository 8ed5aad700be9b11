-- fetch.lua: the JSON of items by id.
-- needs: reads
-- KEYS: meta, items, pinned, attrs (of the window keys, lib/core.lua).
-- ARGV[1]: most bytes of JSON (0 = any); ARGV[2..]: the ids.
-- Reply: {meta, pinned count, {item...}} (lib/reads.lua): the first of the ids whose JSON fits (at
-- least one), each false when the window no longer holds it.
local meta, npinned = window_head()
if not meta then return {{}, 0, {}} end
local out, _, bad = contents({unpack(ARGV, 2)}, tonumber(ARGV[1]) or 0)
if bad then return fail('CORRUPT', K_ATTRS, bad, 'missing') end
return {meta, npinned, out}
