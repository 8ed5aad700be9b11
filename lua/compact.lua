-- compact.lua: server-side compaction (remove_oldest / remove_low_priority) down to a target,
-- at most ARGV[9] items per call, so one call stays short however large the window is.
-- needs: compaction
-- KEYS: the nine window keys. ARGV[1..6]: caller config (unused).
-- ARGV[7]: strategy; ARGV[8]: target percent of max_tokens; ARGV[9]: most items to remove;
-- ARGV[10]: '1' when this call continues a compaction an earlier call began (it is not counted
--   again in the compaction counter).
-- Reply: {tokens freed, more}: more = 1 when the limit stopped it before the target (call again).
--   {0, 0} when there is no max_tokens, nothing to remove, or no window.
local cfg = read_config()
local strategy, target_pct, limit = ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9])
if not SERVER_SIDE[strategy] then return fail('BADARG', 'strategy') end
if not target_pct or target_pct < 0 or target_pct > 100 then return fail('BADARG', 'target') end
if not is_int(limit, 1, 1e6) then return fail('BADARG', 'limit') end
if cfg == nil or cfg.new or cfg.max_tokens == 0 then return {0, 0} end
local target = math.floor(cfg.max_tokens * target_pct / 100)
local ids = plan_compaction(strategy, cfg.tokens, target, {}, {}, true, limit)
if #ids == 0 then return {0, 0} end
local freed = remove_many(ids, 'compaction')
record_compaction(strategy, #ids, freed, cfg.tokens, cfg.max_tokens, ARGV[10] == '1')
rearm_ttl(cfg)
return {freed, (#ids == limit and cfg.tokens - freed > target) and 1 or 0}
