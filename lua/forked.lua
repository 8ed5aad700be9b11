-- forked.lua: note on a window that a fork was made from it (§19): the fork's id joins the
-- window's :meta forks list and a 'forked' event says so. The fork itself is made first, by
-- restore.lua (its lineage: parent, fork_point).
-- needs: meta events
-- KEYS: the window keys (lib/core.lua). A missing window is not made.
-- ARGV[1]: the fork's window id; ARGV[2]: the item it was made at ('' for none).
-- Reply: 1, or 0 when the window is gone (deleted since the fork read it).
local cfg = stored_config()
if not cfg then return 0 end
local forks = words(redis.call('HGET', K_META, F.FORKS) or '')
forks[#forks + 1] = ARGV[1]
hset_words(K_META, F.FORKS, forks)
event('forked', 'fork', ARGV[1], 'fork_point', ARGV[2])
rearm_ttl(cfg)
return 1
