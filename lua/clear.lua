-- clear.lua: remove every unpinned item, or every item with include_pinned.
-- needs: items
-- KEYS: the window keys (lib/core.lua). A missing window is not made.
-- ARGV[1]: '1' to include pinned items. Reply: number of items removed.
-- It counts as a removal by hand: an add whose items it removed runs again when replayed.
local cfg = stored_config()
if not cfg then return 0 end
local include_pinned = ARGV[1] == '1'
local pinned = {}
if not include_pinned then
  for _, id in ipairs(redis.call('SMEMBERS', K_PINNED)) do pinned[id] = true end
end
local ids = {}
for _, id in ipairs(redis.call('LRANGE', K_FIFO, 0, -1)) do
  if not pinned[id] then ids[#ids + 1] = id end
end
local before = cfg.tokens
local freed = remove_many(ids, 'clear')
bump(F.REMOVED_BY_CALLER, 1)
event('cleared', 'items_cleared', fmt(#ids), 'tokens_cleared', fmt(freed),
  'included_pinned', include_pinned and '1' or '0', 'total_tokens_after', fmt(before - freed))
rearm_ttl(cfg)
return #ids
