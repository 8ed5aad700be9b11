-- restore.lua: replace a window's items and config with a snapshot's, atomically.
-- needs: items
-- KEYS: the window keys (lib/core.lua). ARGV[1..N_CONFIG]: caller config (item_limit is taken from it
--   when the window does not exist yet).
-- ARGV[N_CONFIG + 1..2 * N_CONFIG]: the snapshot's config, in layout.Meta.CONFIG order (its
--   item_limit is ignored: a window keeps its own).
-- ARGV[2 * N_CONFIG + 1]: n; then n groups of 10: id, stored JSON, seq, token_count, priority, type,
--   pinned, flags, group, tool link (as in add.lua).
-- Limits are not re-applied. The seq counter ends ahead of every restored seq (and never goes
-- back), so later ids cannot collide with restored ones. Items come in seq order.
-- Reply: number of items restored.
local A, ROW = 2 * N_CONFIG + 1, 10

local function parse_rows(n)
  local items, seen, max_seq = {}, {}, 0
  for i = 1, n do
    local b = A + (i - 1) * ROW
    local it = {id = ARGV[b + 1], json = ARGV[b + 2], seq = tonumber(ARGV[b + 3]),
      tokens = tonumber(ARGV[b + 4]), priority = tonumber(ARGV[b + 5]), type = ARGV[b + 6],
      pinned = ARGV[b + 7] == '1', flags = ARGV[b + 8], group = ARGV[b + 9], calls = {}}
    local link = ARGV[b + 10]
    if it.id == '' or seen[it.id] or not RANK[it.type] or not is_int(it.seq, 1, 1e13)
        or not is_int(it.tokens, 1, MAX_TOKENS) or not is_int(it.priority, 0, MAX_PRIORITY)
        or string.sub(it.json, 1, #STORED_HEAD) ~= STORED_HEAD then
      return nil, i
    end
    if string.sub(link, 1, 2) == 'C:' then
      for _, pair in ipairs(words(string.sub(link, 3))) do
        local name, call = string.match(pair, '^([^=]+)=(.+)$')
        it.calls[#it.calls + 1] = {id = call, name = name}
      end
    end
    seen[it.id] = true
    if it.seq > max_seq then max_seq = it.seq end
    items[i] = it
  end
  return items, max_seq
end

-- Empty the item keys, the archive (undo of an earlier summary is refused after a restore)
-- and the per-type counters (the window's other counters stay).
local function wipe()
  redis.call('DEL', K_ARCHIVE, unpack(ITEM_KEYS))
  local meta = redis.call('HGETALL', K_META)
  for i = 1, #meta, 2 do
    local f = meta[i]
    if string.sub(f, 1, #F.TOKENS_OF) == F.TOKENS_OF or string.sub(f, 1, #F.ITEMS_OF) == F.ITEMS_OF then
      redis.call('HDEL', K_META, f)
    end
  end
end

local function store(it)
  store_item(it, it.json)
  redis.call('HINCRBY', K_META, F.TOKENS_OF .. it.type, it.tokens)
  redis.call('HINCRBY', K_META, F.ITEMS_OF .. it.type, 1)
end

local cfg = read_config()
if not cfg then return fail('BADARG', 'config') end
local c = config_of({unpack(ARGV, N_CONFIG + 1, 2 * N_CONFIG)})
c.item_limit = cfg.item_limit
if not valid_config(c) then return fail('BADARG', 'snapshot config') end
local n = tonumber(ARGV[A])
if not is_int(n, 0, c.item_limit) or #ARGV ~= A + ROW * n then return fail('BADARG', 'items') end
local items, max_seq = parse_rows(n)
if not items then return fail('BADARG', 'item ' .. max_seq) end

local replaced = cfg.items
persist_config(cfg)
wipe()
new_epoch()
local tokens = 0
for _, it in ipairs(items) do
  store(it)
  tokens = tokens + it.tokens
end
redis.call('HSET', K_META, F.TOKENS, fmt(tokens), F.ITEMS, fmt(n), F.SEQ, fmt(math.max(cfg.seq, max_seq)),
  unpack(config_pairs(c)))
CFG = c
CFG.new = false
META_KNOWN[F.TOKENS] = tokens
event('restored', 'items', fmt(n), 'items_replaced', fmt(replaced), 'total_tokens_after', fmt(tokens))
rearm_ttl(c, true)
return n
