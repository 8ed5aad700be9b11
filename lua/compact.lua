-- compact.lua: server-side compaction (remove_oldest / remove_low_priority) down to a target.
-- KEYS: the nine window keys. ARGV[1..6]: caller config (unused).
-- ARGV[7]: strategy; ARGV[8]: target percent of max_tokens.
-- Reply: tokens freed (0 when there is no max_tokens, nothing to remove, or no window).
local cfg = read_config()
local strategy, target_pct = ARGV[7], tonumber(ARGV[8])
if not SERVER_SIDE[strategy] then return fail('BADARG', 'strategy') end
if not target_pct or target_pct < 0 or target_pct > 100 then return fail('BADARG', 'target') end
if cfg == nil or cfg.new or cfg.max_tokens == 0 then return 0 end
local target = math.floor(cfg.max_tokens * target_pct / 100)
local ids = plan_compaction(strategy, cfg.tokens, target, {}, {}, true)
if #ids == 0 then return 0 end
local freed = remove_many(ids, 'compaction')
record_compaction(strategy, #ids, freed, cfg.tokens, cfg.max_tokens)
touch(cfg)
return freed
