-- archived.lua: what a window's archive holds (lib/archive.lua).
-- needs: reads archive
-- KEYS: meta, pinned, archive (of the window keys, lib/core.lua).
-- ARGV[1]: a summary id: the items it replaced (none when the archive has no unexpired entry for
-- it); '': every unexpired entry as "<summary id>=<server ms it expires>".
-- Reply: {meta, pinned count, {item or entry...}} (lib/reads.lua).
local meta, npinned = window_head()
if not meta then return {{}, 0, {}} end
if ARGV[1] == '' then return {meta, npinned, archive_index()} end
local out = {}
for i, row in ipairs(archive_get(ARGV[1]) or {}) do out[i] = archived_entry(row, ARGV[1]) end
return {meta, npinned, out}
