-- compact.lua: server-side compaction (remove_oldest, remove_low_priority, clear_tool_results)
-- down to a target, at most ARGV[3] items per call, so one call stays short however
-- large the window is; or a dry run that only says what it would do.
-- needs: compaction
-- KEYS: the window keys (lib/core.lua). A missing window is not made.
-- ARGV[1]: strategy; ARGV[2]: target percent of max_tokens; ARGV[3]: most items to act on;
-- ARGV[4]: '1' when this call continues a compaction an earlier call began (not counted again in
--   the compaction counter); ARGV[5]: tokens of the cleared-tool-result placeholder; ARGV[6]: '1'
--   for a dry run (nothing written); ARGV[7]: tokens the earlier calls of this compaction freed
--   (they count toward the window's clear_at_least).
-- Reply: {tokens freed, more}: more = 1 when the limit stopped it before the target or clear_at_least (call
--   again); {0, 0} when there is no max_tokens, nothing to do, or no window. A dry run answers
--   {tokens freed, {action, id, type, tokens, freed, group}...} (action: remove / clear).
local cfg = stored_config()
local strategy, target_pct, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local placeholder, dry, earlier = tonumber(ARGV[5]), ARGV[6] == '1', tonumber(ARGV[7])
if not SERVER_SIDE[strategy] then return fail('BADARG', 'strategy') end
if not target_pct or target_pct < 0 or target_pct > 100 then return fail('BADARG', 'target') end
if not is_int(limit, 1, 1e6) or not is_int(placeholder, 1, MAX_TOKENS) then return fail('BADARG', 'limit') end
if not is_int(earlier, 0, MAX_TOKENS) then return fail('BADARG', 'earlier') end
if not cfg or cfg.max_tokens == 0 then return {0, 0} end
cfg.clear_at_least = math.max(0, cfg.clear_at_least - earlier)
local target = math.floor(token_limit(cfg) * target_pct / 100)
local state = {stored = true, removed = {}, cleared = {}, continued = ARGV[4] == '1'}
local actions, freed = plan_compaction(strategy, cfg.tokens, target, state, cfg, placeholder, limit, false)

local function described(acts)
  local out = {}
  for _, act in ipairs(acts) do
    local members = act[1] == 'clear' and {act[2]} or act[2].items
    for _, a in ipairs(members) do
      local gain = act[1] == 'clear' and act[3] or a.tokens
      out[#out + 1] = {act[1], a.id, a.type, fmt(act[1] == 'clear' and (a.tokens + gain) or a.tokens), fmt(gain), a.group}
    end
  end
  return out
end

if dry then return {freed, described(actions)} end
if #actions == 0 then return {0, 0} end
local removed, cleared, got = apply_compaction(actions, placeholder)
record_compaction({strategy = strategy, removed = removed, cleared = cleared, freed = got, before = cfg.tokens,
  max_tokens = token_limit(cfg), changed = actions, continued = ARGV[4] == '1'})
rearm_ttl(cfg)
return {got, state.limited and 1 or 0}
