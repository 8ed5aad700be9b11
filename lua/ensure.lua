-- ensure.lua: attach to a window, creating it with the caller's config if it does not exist.
-- needs: meta
-- KEYS: the window keys (lib/core.lua). ARGV[1..N_CONFIG]: caller config.
-- Reply: {created (1/0), then the config as stored, in layout.Meta.CONFIG order}.
local cfg = read_config()
if not cfg then return fail('BADARG', 'config') end
local created = 0
if cfg.new then
  persist_config(cfg)
  rearm_ttl(cfg)
  created = 1
end
local out = config_list(cfg)
table.insert(out, 1, created)
return out
