-- acl.lua: the commands of ARGV the calling ACL user may not run (redis.acl_check_cmd), so that
-- a store refuses a write before its script would be stopped part-way.
-- needs: core
-- KEYS: meta (of the window keys, lib/core.lua): it stands for the key of each call.
-- ARGV: calls of the commands with arguments of their arity, 'K' for a key (layout.SCRIPT_CALLS):
--   acl_check_cmd is given the whole call (Redis 7.0 crashes on some commands given none).
-- Reply: the names of the commands the user lacks ('object|encoding' for a subcommand; {} when
-- none).
local lacking = {}
for _, call in ipairs(ARGV) do
  local words = {}
  for w in string.gmatch(call, '%S+') do words[#words + 1] = w == 'K' and KEYS[1] or w end
  if not redis.acl_check_cmd(unpack(words)) then
    lacking[#lacking + 1] = words[1] == 'object' and ('object|' .. words[2]) or words[1]
  end
end
return lacking
