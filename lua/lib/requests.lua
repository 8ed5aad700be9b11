-- lib/requests.lua: exactly-once requests, and run_request, which runs every script that takes one.
-- needs: meta calls
--
-- A script that wrote something records its reply under its request id; the same request id
-- again (a retry whose first reply was lost) returns that reply and writes nothing. The log
-- keeps the last REQUEST_LOG_MAX requests younger than REQUEST_LOG_TTL_MS; both keys expire
-- when the window is idle that long. A request that wrote nothing (an error, a no-op) is not
-- recorded: running it again is as safe as running it once.
-- A recorded reply stands only while what it reports is still there: an add whose items were
-- all removed by hand since (remove, pop, clear, a restore without them) runs again as a new
-- request (REPLAY_STANDS), so an acknowledged add never stores nothing; one whose items the
-- window's own rules took (eviction, compaction) replays, so it is never applied twice.
-- delete() ends the log (forget_requests): a request id used before it is new after it.
-- A record is '<fingerprint>|<RECORD_FORMAT>\n<record JSON>' (one without '|<format>' is format
-- 1): a retry that finds a record of another format (another version's scripts wrote it, during
-- an upgrade) gets RECORDED: it was applied once, and this version cannot rebuild its reply.

local function expire_requests(n, now)
  if n > REQUEST_LOG_MAX then  -- keep the newest REQUEST_LOG_MAX
    local old = redis.call('LRANGE', K_REQUESTS, 0, n - REQUEST_LOG_MAX - 1)
    redis.call('LTRIM', K_REQUESTS, n - REQUEST_LOG_MAX, -1)
    for i = 1, #old do old[i] = string.match(old[i], '^%d+|(.+)$') end
    for i = 1, #old, 500 do redis.call('HDEL', K_REPLIES, unpack(old, i, math.min(i + 499, #old))) end
    return
  end
  if n % 8 ~= 0 then return end  -- look at the oldest every 8th request, and expire up to 32
  for _ = 1, 32 do
    local t, old = string.match(redis.call('LINDEX', K_REQUESTS, 0), '^(%d+)|(.+)$')
    if tonumber(t) > now - REQUEST_LOG_TTL_MS then break end
    redis.call('LPOP', K_REQUESTS)
    redis.call('HDEL', K_REPLIES, old)
  end
end

local function record_request(rid, fp, record)
  local now = math.floor(now_us() / 1000)
  redis.call('HSET', K_REPLIES, rid, fp .. '|' .. RECORD_FORMAT .. '\n' .. cjson.encode(record))
  expire_requests(redis.call('RPUSH', K_REQUESTS, fmt(now) .. '|' .. rid), now)
  redis.call('PEXPIRE', K_REQUESTS, REQUEST_LOG_TTL_MS)
  redis.call('PEXPIRE', K_REPLIES, REQUEST_LOG_TTL_MS)
end

-- Drop the record of `rid` (its reply and its place in the log): it stands for nothing now.
local function forget_request(rid)
  redis.call('HDEL', K_REPLIES, rid)
  local tail = '|' .. rid
  for _, entry in ipairs(redis.call('LRANGE', K_REQUESTS, 0, -1)) do
    if string.sub(entry, -#tail) == tail then redis.call('LREM', K_REQUESTS, 0, entry) end
  end
end

-- End the log: every request id before this call is new after it.
local function forget_requests()
  redis.call('UNLINK', K_REQUESTS, K_REPLIES)
end

-- For a request seen before: true and its recorded reply (or the REUSED error when the same
-- id came with other arguments, RECORDED when another format's record cannot be replayed); for
-- a new one, or one whose recorded result no longer stands (its record is dropped; the
-- arguments are the same, so the record's offsets into ARGV hold): false.
local function replay(rid, fp)
  local prior = redis.call('HGET', K_REPLIES, rid)
  if not prior then return false end
  local nl = string.find(prior, '\n', 1, true)
  local pfp, format = string.match(string.sub(prior, 1, (nl or 1) - 1), '^(%x*)|?(%d*)$')
  if not pfp then corrupt(K_REPLIES, rid, 'not a request record') end
  format = tonumber(format) or 1
  if format ~= RECORD_FORMAT then return true, fail('RECORDED', rid, fmt(format), fmt(RECORD_FORMAT)) end
  if pfp ~= '' and fp ~= '' and pfp ~= fp then return true, fail('REUSED', rid) end
  local rec = stored_object(K_REPLIES, rid, string.sub(prior, nl + 1))
  for kind, stands in pairs(REPLAY_STANDS) do
    if rec[kind] and not stands(rec, rid) then
      forget_request(rid)
      return false
    end
  end
  for kind, rebuild in pairs(REPLAYS) do
    if rec[kind] then return true, rebuild(rec[kind]) end
  end
  return true, rec.r
end

-- A mutation's reply with the window's counters after it (its token limit through its
-- calibration: lib/meta.lua token_limit) and what this call compacted (a counter that is not an
-- integer, in a corrupt window, answers 0).
local function with_counters(reply)
  local m
  if COUNTERS_KNOWN then  -- add.lua: every counter change went through meta.lua, flush_meta wrote it
    m = {fmt(META_KNOWN[F.TOKENS]), fmt(META_KNOWN[F.ITEMS]), fmt(token_limit(CFG))}
  else
    m = redis.call('HMGET', K_META, F.TOKENS, F.ITEMS, F.MAX_TOKENS, F.CALIBRATION)
    for i = 1, 3 do m[i] = string.match(m[i] or '', '^%d+$') or '0' end
    local calibration = tonumber(m[4])
    m[3] = fmt(token_limit({max_tokens = tonumber(m[3]), calibration = calibration and calibration > 0 and calibration}))
  end
  return {reply, m[1], m[2], m[3], fmt(RUN.compactions), fmt(RUN.freed), fmt(RUN.invalidated)}
end

-- Run a script's main() for one call (its keys and args) under the request protocol. main
-- returns its reply and, optionally, a smaller record to keep instead of the reply ({add = ...}
-- for add, rebuilt by REPLAYS.add). A mutation (a script with a request) answers
-- with_counters(reply), and sends usage_warning events (lib/meta.lua).
local function run_request(main, keys, args)
  begin_call(keys, args)
  if REQUEST == '' then
    local reply, stopped = guarded(main)
    if reply == nil then return stopped end
    flush_meta()
    return reply
  end
  local rid, fp = string.match(REQUEST, '^(.+)|(%x*)$')
  if not rid then return with_counters(fail('BADARG', 'request')) end
  local seen, prior = guarded(replay, rid, fp)
  if seen == nil or seen then return with_counters(prior) end  -- replayed, or a corrupt record
  local reply, record = guarded(main)
  if reply == nil then return with_counters(record) end  -- corrupt: the checks wrote nothing
  if WROTE then
    check_usage()
    if CFG and not CFG.new and meta_get(F.EPOCH) == 0 then new_epoch() end  -- written before epochs
  end
  flush_meta()
  if WROTE then record_request(rid, fp, record or {r = reply}) end
  return with_counters(reply)
end
