-- restore.lua: replace a window's items and config with a snapshot's, atomically.
-- needs: items
-- KEYS: the nine window keys. ARGV[1..6]: caller config (item_limit is taken from it when the
--   window does not exist yet).
-- ARGV[7..11]: snapshot config: max_tokens (0 = none), max_items, threshold, strategy, ttl (0 = none)
-- ARGV[12]: n; then n groups of 7: id, stored JSON, seq, token_count, priority, type, pinned.
-- Limits are not re-applied. The seq counter ends ahead of every restored seq (and never goes
-- back), so later ids cannot collide with restored ones.
-- Reply: number of items restored.

local function parse_rows(n)
  local items, seen, max_seq = {}, {}, 0
  for i = 1, n do
    local b = 12 + (i - 1) * 7
    local it = {id = ARGV[b + 1], json = ARGV[b + 2], seq = tonumber(ARGV[b + 3]),
      tokens = tonumber(ARGV[b + 4]), priority = tonumber(ARGV[b + 5]), type = ARGV[b + 6],
      pinned = ARGV[b + 7] == '1'}
    if it.id == '' or seen[it.id] or not RANK[it.type] or not is_int(it.seq, 1, 1e13)
        or not is_int(it.tokens, 1, MAX_TOKENS) or not is_int(it.priority, 0, MAX_PRIORITY)
        or string.sub(it.json, 1, 12) ~= '{"priority":' then
      return nil, i
    end
    seen[it.id] = true
    if it.seq > max_seq then max_seq = it.seq end
    items[i] = it
  end
  return items, max_seq
end

-- Empty the item keys and the per-type counters (the window's other counters stay).
local function wipe()
  redis.call('DEL', unpack(ITEM_KEYS))
  local meta = redis.call('HGETALL', K_META)
  for i = 1, #meta, 2 do
    local f = meta[i]
    if string.sub(f, 1, #F.TOKENS_OF) == F.TOKENS_OF or string.sub(f, 1, #F.ITEMS_OF) == F.ITEMS_OF then
      redis.call('HDEL', K_META, f)
    end
  end
end

local cfg = read_config()
if not cfg then return fail('BADARG', 'config') end
local c = {
  max_tokens = tonumber(ARGV[7]), max_items = tonumber(ARGV[8]), threshold = tonumber(ARGV[9]),
  strategy = ARGV[10], ttl = tonumber(ARGV[11]), item_limit = cfg.item_limit,
}
if not valid_config(c) then return fail('BADARG', 'snapshot config') end
local n = tonumber(ARGV[12])
if not is_int(n, 0, c.item_limit) or #ARGV ~= 12 + 7 * n then return fail('BADARG', 'items') end
local items, max_seq = parse_rows(n)
if not items then return fail('BADARG', 'item ' .. max_seq) end

local replaced = cfg.items
persist_config(cfg)
wipe()
local tokens = 0
for _, it in ipairs(items) do
  redis.call('HSET', K_ITEMS, it.id, it.json)
  redis.call('HSET', K_ATTRS, it.id, pack_attrs(it.seq, it.tokens, it.priority, it.type))
  redis.call('ZADD', K_ORDER, score(it.type, it.priority, it.seq), it.id)
  redis.call('RPUSH', K_FIFO, it.id)
  if it.pinned then redis.call('SADD', K_PINNED, it.id) end
  redis.call('HINCRBY', K_META, F.TOKENS_OF .. it.type, it.tokens)
  redis.call('HINCRBY', K_META, F.ITEMS_OF .. it.type, 1)
  tokens = tokens + it.tokens
end
redis.call('HSET', K_META, F.MAX_TOKENS, fmt(c.max_tokens), F.MAX_ITEMS, fmt(c.max_items),
  F.THRESHOLD, tostring(c.threshold), F.STRATEGY, c.strategy, F.TTL, fmt(c.ttl),
  F.TOKENS, fmt(tokens), F.ITEMS, fmt(n), F.SEQ, fmt(math.max(cfg.seq, max_seq)))
event('restored', 'items', fmt(n), 'items_replaced', fmt(replaced), 'total_tokens_after', fmt(tokens))
rearm_ttl(c, true)
return n
