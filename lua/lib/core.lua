-- lib/core.lua: what every script stands on: its keys, its request, error replies, numbers.
-- needs: constants
--
-- A script is assembled by contextstore/drivers/scripts.py: the lib files the script names in its
-- `needs:` line (and theirs, lib/constants.lua first), then the script's body as
-- `local function main() ... end`, then `return run_request(main)`.
--
-- KEYS (the same seventeen for every script, all under the hash tag {<window_id>}):
--   KEYS[1] meta     hash: config + counters (field names: F, generated)
--   KEYS[2] items    hash: id -> item JSON
--   KEYS[3] order    zset: id scored in build order (type rank, priority desc, seq asc)
--   KEYS[4] fifo     list: ids in arrival order
--   KEYS[5] pinned   set:  ids of pinned items
--   KEYS[6] attrs    hash: id -> "seq|tokens|priority|type[|flags|group]" (what limits need,
--                    without the JSON; lib/items.lua pack_attrs)
--   KEYS[7] events   stream: one entry per mutation
--   KEYS[8] requests list: "<server time ms>|<request id>", oldest first (what to expire)
--   KEYS[9] replies  hash: request id -> "<fingerprint>|<RECORD_FORMAT>\n<reply record JSON>"
--   KEYS[10] groups  hash: group -> its member ids in arrival order, space-separated
--   KEYS[11] calls   hash: tool call id -> "<group> <tool name>" (the call's assistant message)
--   KEYS[12] archive hash: summary id -> JSON of the items it replaced; ARCHIVE_INDEX -> when
--                    each entry expires (lib/archive.lua)
--   KEYS[13] vectors hash: item id -> "<scorer tag>|<content sha1>|<base64 float32>" (embeddings
--                    cached for EmbeddingScorer; removed with the item)
--   KEYS[14] lease   string: the token of the compactor working on the window (PX expiry)
--   KEYS[15] turn    hash: the running turn's lease and the inputs enqueued for it (lib/turns.lua)
--   KEYS[16] blobs   hash: sha -> how many of the window's items and archived rows refer to that
--                    blob (contextstore/core/blobs.py; lib/items.lua count_blobs)
--   KEYS[17] sizes   zset: each user and assistant message's id, scored by its size class and
--                    seq (lib/items.lua size_score): where a build's walk finds the older
--                    messages that may still fit its budget (contextstore/plans/facts_read.py)
-- ARGV[1] of every script: the request, "<request id>|<fingerprint>", or "" (no request id).
--   It is removed from ARGV before the script runs, so a script's own arguments start at ARGV[1].
-- KEYS and ARGV are locals of the assembled script (contextstore/drivers/scripts.py): the call's own.
-- ARGV[1..N_CONFIG] of a script that may create the window (add, configure, ensure, restore:
--   wire.TAKES_CONFIG; after that removal): the caller's config, used only when the window does not
--   exist yet (read_config, lib/meta.lua), in CONFIG_FIELDS order. The other scripts never make a
--   window (stored_config) and take only their own arguments.
-- The reply of a mutating script (one with a request) is {reply, tokens, items, token limit,
-- compactions, tokens freed, tokens invalidated}: the window's counters after it, and what this
-- call compacted (lib/requests.lua); contextstore records them as metrics and hands the reply to
-- its plan.
-- Error replies are tables {'!', CODE, detail...}; contextstore/errors.py maps each CODE to a
-- typed exception. Every script checks everything before its first write: Redis does not roll
-- scripts back.

-- A call's keys, its request and its own state. They are set afresh for every call by
-- begin_call (lib/calls.lua): a function library (Redis 7+) keeps these helpers loaded
-- between calls, so nothing of one call may stay for the next.
local K_META, K_ITEMS, K_ORDER, K_FIFO, K_PINNED, K_ATTRS, K_EVENTS, K_REQUESTS, K_REPLIES
local K_GROUPS, K_CALLS, K_ARCHIVE, K_VECTORS, K_LEASE, K_TURN, K_BLOBS, K_SIZES
local REQUEST = ''
local WROTE = false  -- set by every write helper; a request is recorded only if it wrote
local CFG = nil      -- the window's config once read_config ran (lib/meta.lua)
local RUN = {}       -- what this call compacted (lib/compaction.lua): {compactions, freed, invalidated}
local COUNTERS_KNOWN = false  -- set by a script whose counters all went through lib/meta.lua (saves a read)
local NOW_US = nil   -- the server's clock, read once per call
local META_KNOWN, META_DELTA, META_DIRTY = {}, {}, {}  -- the counters of :meta read and changed (lib/meta.lua)
local REPLAYS = {}   -- record kind -> function(record) rebuilding a reply (lib/requests.lua)
local REPLAY_STANDS = {}  -- record kind -> function(record, rid): whether its result is still there

local function fail(code, ...)
  return {'!', code, ...}
end

-- A stored value in a shape no script writes (changed by hand or by a foreign program): stop
-- the call. run_request answers {'!', 'CORRUPT', key, field, what}; every script reads and
-- checks what it parses before its first write, so nothing is written.
local function corrupt(key, field, what)
  error({corrupt = {key, field or '', what or ''}}, 0)
end

-- Whether `s` is UTF-8 as Python's strict decoder takes it (no overlong forms, no surrogates):
-- each valid sequence is replaced by one ASCII byte (so no two invalid remnants can meet), and
-- none of the high bytes may be left.
local function is_utf8(s)
  if not string.find(s, '[\128-\255]') then return true end
  for _, seq in ipairs({
    '[\194-\223][\128-\191]', '\224[\160-\191][\128-\191]', '[\225-\236][\128-\191][\128-\191]',
    '\237[\128-\159][\128-\191]', '[\238-\239][\128-\191][\128-\191]',
    '\240[\144-\191][\128-\191][\128-\191]', '[\241-\243][\128-\191][\128-\191][\128-\191]',
    '\244[\128-\143][\128-\191][\128-\191]',
  }) do
    s = string.gsub(s, seq, 'A')
  end
  return not string.find(s, '[\128-\255]')
end

-- The CORRUPT reply an error `e` caught by pcall stands for (corrupt(), or a key of another type
-- than the scripts write), or nil for any other error.
local function corruption_of(e)
  if type(e) == 'table' and e.corrupt then return fail('CORRUPT', unpack(e.corrupt)) end
  local text = type(e) == 'table' and e.err or e
  if type(text) == 'string' and string.find(text, 'WRONGTYPE', 1, true) then
    return fail('CORRUPT', '', '', 'a key of the window holds another type than the scripts write')
  end
  return nil
end

-- A stored JSON object (key's field), decoded; corrupt() when it is not one.
local function stored_object(key, field, json)
  local ok, v = pcall(cjson.decode, json or '')
  if not ok or type(v) ~= 'table' then corrupt(key, field, 'not a JSON object') end
  return v
end

-- Integers of any size we use, printed exactly (tostring would use %.14g). '%d' formats a C long,
-- three times faster than '%.0f'; a server whose long cannot hold 2^53 keeps '%.0f'. Checked on
-- first use: a function library's load step has no string library.
local INT_FORMAT = nil
local function fmt(n)
  if not INT_FORMAT then INT_FORMAT = string.format('%d', 2 ^ 53) == '9007199254740992' and '%d' or '%.0f' end
  return string.format(INT_FORMAT, n)
end

local function pct(tokens, max_tokens)
  if not max_tokens or max_tokens <= 0 then return '0' end
  return string.format('%.2f', tokens * 100 / max_tokens)
end

local function is_int(v, lo, hi)  -- (v % 1: NaN for NaN and infinities, which fail)
  return v ~= nil and v % 1 == 0 and v >= lo and v <= hi
end

-- A stored counter or limit (key's field, raw: a string or false when missing): its integer
-- value in lo..hi (0 when missing); corrupt() for anything else.
local function stored_int(key, field, raw, lo, hi)
  if not raw then return 0 end
  local v = tonumber(raw)
  if not is_int(v, lo, hi) then corrupt(key, field, 'not an integer from ' .. lo .. ' to ' .. hi) end
  return v
end

-- The words of a space-separated string, as a list.
local function words(s)
  local out = {}
  for w in string.gmatch(s or '', '%S+') do out[#out + 1] = w end
  return out
end

-- Store `list` space-separated under a hash field, or delete the field when it is empty.
local function hset_words(key, field, list)
  if #list == 0 then
    redis.call('HDEL', key, field)
  else
    redis.call('HSET', key, field, table.concat(list, ' '))
  end
end

local function now_us()  -- the server's clock, read once per call
  if not NOW_US then
    local t = redis.call('TIME')
    NOW_US = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return NOW_US
end

local function now_ms()
  return math.floor(now_us() / 1000)
end

-- The keys that hold the window's items (a new lifetime or a restore deletes them).
local function item_keys()
  return {K_ITEMS, K_ORDER, K_FIFO, K_PINNED, K_ATTRS, K_GROUPS, K_CALLS, K_VECTORS, K_BLOBS, K_SIZES}
end

-- Every key of the window that a TTL re-arms (not the request log, nor the compactor's lease).
local function all_keys()
  return {K_META, K_ITEMS, K_ORDER, K_FIFO, K_PINNED, K_ATTRS, K_EVENTS, K_GROUPS, K_CALLS, K_ARCHIVE, K_VECTORS, K_TURN,
    K_BLOBS, K_SIZES}
end
