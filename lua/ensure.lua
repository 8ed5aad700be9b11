-- ensure.lua: attach to a window, creating it with the caller's config if it does not exist.
-- needs: meta
-- KEYS: the nine window keys. ARGV[1..6]: caller config.
-- Reply: {created (1/0), max_tokens, max_items, item_limit, threshold, strategy, ttl} as stored.
local cfg = read_config()
if not cfg then return fail('BADARG', 'config') end
local created = 0
if cfg.new then
  persist_config(cfg)
  rearm_ttl(cfg)
  created = 1
end
return {created, fmt(cfg.max_tokens), fmt(cfg.max_items), fmt(cfg.item_limit),
  tostring(cfg.threshold), cfg.strategy, fmt(cfg.ttl)}
