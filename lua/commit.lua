-- commit.lua: commit a compaction computed outside Redis (summarize / selective).
-- needs: compaction archive
-- KEYS: the window keys (lib/core.lua). A missing window is not made.
-- ARGV[1]: strategy; ARGV[2]: n; from ARGV[3..], n pairs (id, sha1 of the stored JSON, a newline
--   and the attrs the caller read); then, for summarize, one item group of ITEM_ARGS as in add.lua
--   (the summary, without id).
-- Checks first: every item is unchanged, unpinned, not among the keep_recent newest
--   conversation units, and takes its whole group with it; else {'!', 'CONFLICT', id} and
--   nothing is written.
-- A summary takes the seq of the oldest item it replaces and that item's place in arrival
--   order; its id is ctx-<seq>.<n> (n counts the window's summaries). The replaced items go to
--   the archive for archive_ttl seconds (lib/archive.lua).
-- Reply: {tokens freed (net of the summary), summary id or ''}.
local cfg = stored_config()
local strategy, n = ARGV[1], tonumber(ARGV[2])
if not STRATEGIES[strategy] or not is_int(n, 1, 1e6) then return fail('BADARG', 'commit') end
local base = 2 + 2 * n
local summary = nil
if #ARGV == base + ITEM_ARGS then
  summary = parse_item(base)
  if not summary or summary.pinned or summary.group ~= '' then return fail('BADARG', 'summary') end
elseif #ARGV ~= base then
  return fail('BADARG', 'arity')
end
if not cfg then return fail('CONFLICT', ARGV[3]) end

-- the items as read: unchanged, unpinned; returns ids, their attrs, the set of them
local function checked_items()
  local ids, attrs, chosen = {}, {}, {}
  for i = 1, n do
    local id, sha = ARGV[1 + 2 * i], ARGV[2 + 2 * i]
    local e = raw_item(id)
    if not e or redis.sha1hex(e[2] .. '\n' .. e[3]) ~= sha or e[4] == 1 then
      return nil, id
    end
    ids[i], attrs[i], chosen[id] = id, unpack_attrs(e[3], id), true
  end
  return ids, attrs, chosen
end

-- the first id that breaks a group apart or is among the keep_recent newest units, or nil
local function breaks_units(ids, attrs, chosen)
  for _, a in ipairs(attrs) do
    for _, m in ipairs(a.group ~= '' and group_members(a.group) or {}) do
      if not chosen[m] then return m end
    end
  end
  local kept = kept_units({stored = true, removed = {}}, cfg.keep_recent)
  for i, a in ipairs(attrs) do
    if kept[unit_key(ids[i], a)] then return ids[i] end
  end
  return nil
end

-- the oldest item, and the first item after it in arrival order that stays (nil: none)
local function place_of(ids, attrs, chosen)
  local oldest = 1
  for i, a in ipairs(attrs) do
    if a.seq < attrs[oldest].seq then oldest = i end
  end
  local at = redis.call('LPOS', K_FIFO, ids[oldest])
  for _, id in ipairs(redis.call('LRANGE', K_FIFO, at + 1, at + n)) do
    if not chosen[id] then return attrs[oldest].seq, id end
  end
  return attrs[oldest].seq, nil
end

local ids, attrs, chosen = checked_items()
if not ids then return fail('CONFLICT', attrs) end
local broken = breaks_units(ids, attrs, chosen)
if broken then return fail('CONFLICT', broken) end
local freed = 0
for _, a in ipairs(attrs) do freed = freed + a.tokens end
if summary and summary.tokens >= freed then return fail('BADARG', 'summary not smaller') end

local before = cfg.tokens
local summary_id = ''
local gone = removal(ids)  -- read and checked before the first write
if summary then
  local seq, successor = place_of(ids, attrs, chosen)
  local k = meta_get(F.SUMMARIES) + 1
  while redis.call('HEXISTS', K_ITEMS, 'ctx-' .. fmt(seq) .. '.' .. fmt(k)) == 1 do k = k + 1 end
  summary_id = 'ctx-' .. fmt(seq) .. '.' .. fmt(k)
  meta_set(F.SUMMARIES, k)
  archive_put(summary_id, ids, cfg.archive_ttl)
  remove_many(ids, 'compaction', gone)
  summary.seq, summary.id, summary.ts = seq, summary_id, now_us()
  insert_item(summary, successor)
  new_epoch()  -- the summary takes a seq already handed out
  freed = freed - summary.tokens
else
  remove_many(ids, 'compaction', gone)
end
record_compaction({strategy = strategy, removed = #ids, freed = freed, before = before, max_tokens = token_limit(cfg),
  changed = attrs, summary_id = summary_id})
rearm_ttl(cfg)
return {freed, summary_id}
