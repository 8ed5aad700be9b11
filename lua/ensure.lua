-- ensure.lua: attach to a window, creating it with the caller's config if it does not exist.
-- needs: meta
-- KEYS: the eleven window keys. ARGV[1..N_CONFIG]: caller config.
-- Reply: {created (1/0), then the config as stored, in layout.Meta.CONFIG order}.
local cfg = read_config()
if not cfg then return fail('BADARG', 'config') end
local created = 0
if cfg.new then
  persist_config(cfg)
  rearm_ttl(cfg)
  created = 1
end
return {created, fmt(cfg.max_tokens), fmt(cfg.max_items), fmt(cfg.item_limit),
  tostring(cfg.threshold), cfg.strategy, fmt(cfg.ttl), fmt(cfg.keep_recent), fmt(cfg.clear_at_least),
  cfg.clear_exclude, tostring(cfg.warn_percent), fmt(cfg.events_maxlen)}
