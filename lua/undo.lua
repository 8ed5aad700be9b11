-- undo.lua: put back the items a summary replaced and remove the summary, atomically.
-- needs: archive
-- KEYS: the window keys (lib/core.lua). A missing window is not made.
-- ARGV[1]: the summary id.
-- The items come back exactly as they were stored (ids, seq, content, groups, tool calls), in
--   their places in arrival order; limits are checked, not applied: if they no longer fit,
--   {'!', 'FULL', unit, current, max, requested}. {'!', 'NOSUMMARY', id, where} when the archive
--   has no (unexpired) entry for it, or the summary is no longer in the window; {'!', 'INUSE',
--   what, name} when one of their ids, tool call ids or groups is in use again.
-- Reply: the number of items put back.
local cfg = stored_config()
local summary_id = ARGV[1]
if not cfg then return fail('NOSUMMARY', summary_id, 'window') end
local rows = archive_get(summary_id)
if not rows then return fail('NOSUMMARY', summary_id, 'archive') end
local packed = redis.call('HGET', K_ATTRS, summary_id)
if not packed then return fail('NOSUMMARY', summary_id, 'window') end
local summary = unpack_attrs(packed, summary_id)
summary.id = summary_id

local items, refused = put_back(cfg, summary_id, rows, summary)
if not items then return refused end
event('summary_undone', 'summary_id', summary_id, 'items_restored', fmt(#items),
  'total_tokens_after', fmt(meta_get(F.TOKENS)))
rearm_ttl(cfg)
return #items
