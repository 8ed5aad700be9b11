-- commit.lua: commit a compaction computed outside Redis (summarize / selective).
-- needs: compaction
-- KEYS: the eleven window keys. ARGV[1..N_CONFIG]: caller config (unused).
-- ARGV[N_CONFIG + 1]: strategy; + 2: n; then n pairs (id, sha1 of the item JSON the caller
--   read); then, for summarize, one item group of 8 as in add.lua (the summary).
-- Reply: tokens freed (net of the summary), or {'!', 'CONFLICT', id} when an item changed,
--   vanished or was pinned since it was read (nothing is written then).
local A = N_CONFIG
local cfg = read_config()
local strategy, n = ARGV[A + 1], tonumber(ARGV[A + 2])
if not STRATEGIES[strategy] or not is_int(n, 1, 1e6) then return fail('BADARG', 'commit') end
local base = A + 2 + 2 * n
local summary = nil
if #ARGV == base + 8 then
  summary = parse_item(base)
  if not summary then return fail('BADARG', 'summary') end
elseif #ARGV ~= base then
  return fail('BADARG', 'arity')
end
if cfg == nil or cfg.new then return fail('CONFLICT', ARGV[A + 3]) end

local ids, freed = {}, 0
for i = 1, n do
  local id, sha = ARGV[A + 1 + 2 * i], ARGV[A + 2 + 2 * i]
  local json = redis.call('HGET', K_ITEMS, id)
  if not json or redis.sha1hex(json) ~= sha or redis.call('SISMEMBER', K_PINNED, id) == 1 then
    return fail('CONFLICT', id)
  end
  ids[#ids + 1] = id
  freed = freed + unpack_attrs(redis.call('HGET', K_ATTRS, id)).tokens
end
if summary and summary.tokens >= freed then return fail('BADARG', 'summary not smaller') end

local before = cfg.tokens
remove_many(ids, 'compaction')
if summary then
  local seq = cfg.seq + 1
  summary.seq, summary.id, summary.ts = seq, 'ctx-' .. fmt(seq), now_us()
  insert_item(summary)
  meta_set(F.SEQ, seq)
  freed = freed - summary.tokens
end
record_compaction(strategy, #ids, freed, before, cfg.max_tokens)
rearm_ttl(cfg)
return freed
