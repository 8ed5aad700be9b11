-- commands.lua: read commands in one atomic step, for a client that sends no MULTI/EXEC (a
-- cluster's): what a plan's plain read (plans/base.py PlainRead) asks, answered as the
-- transaction would answer it (drivers/plain_reads.py puts the replies in redis-py's shapes).
-- needs: core
-- KEYS: the window keys the commands read, as given.
-- ARGV[1..]: the commands, each as its verb (one of READS), the place in KEYS of the key it
-- reads, the count of its further words, and those words.
-- Reply: {reply...}, one per command in order; an error reply (a key of another type) in its place.
-- the commands a plain read sends; an HMGET is sent in parts of HMGET_PART fields (Lua's unpack
-- takes a few thousand values at most)
local READS = {GET = true, HGETALL = true, SMEMBERS = true, HSCAN = true, HMGET = true, LRANGE = true, ZRANGEBYSCORE = true,
  ZCOUNT = true, ZCARD = true}
local HMGET_PART = 1000

-- HMGET of `key`'s fields ARGV[first..last], in parts; an error reply as it is.
local function hmget(key, first, last)
  local out = {}
  for at = first, last, HMGET_PART do
    local got = redis.pcall('HMGET', key, unpack(ARGV, at, math.min(at + HMGET_PART - 1, last)))
    if got.err then return got end
    for i = 1, #got do out[#out + 1] = got[i] end
  end
  return out
end

-- main: the call
local out, at = {}, 1
while at <= #ARGV do
  local verb, key, n = ARGV[at], KEYS[tonumber(ARGV[at + 1]) or 0], tonumber(ARGV[at + 2])
  if not READS[verb] or not key or not n then return fail('BADARG', 'command') end
  if verb == 'HMGET' then
    out[#out + 1] = hmget(key, at + 3, at + 2 + n)
  else
    out[#out + 1] = redis.pcall(verb, key, unpack(ARGV, at + 3, at + 2 + n))
  end
  at = at + 3 + n
end
return out
