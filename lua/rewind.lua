-- rewind.lua: take a window back to one of its items (rewind), or put back what a rewind took
-- (undo), atomically.
-- needs: archive turns
-- KEYS: the window keys (lib/core.lua). A missing window is not made.
-- ARGV[1]: 'rewind' or 'undo'; ARGV[2]: the item the window goes back to (rewind), or the rewind
--   id (undo); ARGV[3]: conditions, as add.lua's: 'v=<version>' the version the window must be
--   at, 't=<token>' the turn the call is part of (lib/turns.lua).
-- Rewind: every item added after ARGV[2] (arrival order), pinned ones too, leaves the window and
--   waits in the archive under a new rewind id, 'rewind-<seq of ARGV[2]>-<n>', for archive_ttl
--   seconds (lib/archive.lua). Undo: those items come back exactly as they were, in their places,
--   as undo.lua puts back a summary's. A rewind counts as a removal by hand (an add it took
--   runs again when replayed).
-- Refused with nothing written: {'!', 'NOITEM', id} when ARGV[2] is not in the window (rewind);
--   {'!', 'SPLIT', group} when a tool-call group has items on both sides of it; {'!', 'NOREWIND',
--   id} when the archive holds no (unexpired) rewind of that id (undo); {'!', 'TURNBUSY', owner,
--   ms left} when a turn holds the window and the call is not part of it; {'!', 'TURNLOST', why}
--   when the turn it is part of lost its lease; {'!', 'MOVED', 'version', current}; an undo's
--   FULL and INUSE as undo.lua's.
-- Reply: the rewind id (rewind); the number of items put back (undo).
local cfg = stored_config()
local mode, target = ARGV[1], ARGV[2]
if mode ~= 'rewind' and mode ~= 'undo' then return fail('BADARG', 'mode') end
if not cfg then return fail(mode == 'rewind' and 'NOITEM' or 'NOREWIND', target) end

-- The conditions, checked: nil, or the error reply.
local function refused()
  local c, bad = parse_conditions(ARGV[3])
  if not c then return bad end
  if c.begin or c.take then return fail('BADARG', 'conditions') end
  if c.version and c.version ~= window_version() then return fail('MOVED', 'version', window_version()) end
  if c.fence then
    local _, lost = plan_turn(c)
    return lost
  end
  local turn = running_turn()
  if turn then return fail('TURNBUSY', turn.owner, fmt(turn.until_ms - now_ms())) end
  return nil
end

-- The ids after `id` in arrival order, or nil when it is not in the window.
local function after(id)
  if redis.call('HEXISTS', K_ATTRS, id) == 0 then return nil end
  local at = redis.call('LPOS', K_FIFO, id)
  if not at then corrupt(K_FIFO, id, 'missing') end
  return redis.call('LRANGE', K_FIFO, at + 1, -1)
end

-- The first group of `ids` with a member that is not among them, or nil.
local function split_group(ids)
  local leaving = {}
  for _, id in ipairs(ids) do leaving[id] = true end
  for i = 1, #ids, 500 do
    local packed = redis.call('HMGET', K_ATTRS, unpack(ids, i, math.min(i + 499, #ids)))
    for j, a in ipairs(packed) do
      local group = unpack_attrs(a, ids[i + j - 1]).group
      for _, m in ipairs(group ~= '' and group_members(group) or {}) do
        if not leaving[m] then return group end
      end
    end
  end
  return nil
end

-- A rewind id no archive entry has.
local function new_rewind_id(to)
  local seq, n = unpack_attrs(redis.call('HGET', K_ATTRS, to), to).seq, 1
  while redis.call('HEXISTS', K_ARCHIVE, 'rewind-' .. fmt(seq) .. '-' .. fmt(n)) == 1 do n = n + 1 end
  return 'rewind-' .. fmt(seq) .. '-' .. fmt(n)
end

local function rewind(to)
  local ids = after(to)
  if not ids then return fail('NOITEM', to) end
  local group = split_group(ids)
  if group then return fail('SPLIT', group) end
  local rid, gone = new_rewind_id(to), removal(ids)  -- read and checked before the first write
  archive_put(rid, ids, cfg.archive_ttl)
  remove_many(ids, 'rewind', gone)
  bump(F.REMOVED_BY_CALLER, 1)
  event('rewound', 'rewind_id', rid, 'item_id', to, 'items_removed', fmt(#ids),
    'total_tokens_after', fmt(meta_get(F.TOKENS)))
  return rid
end

local function undo(rid)
  local rows = string.sub(rid, 1, 7) == 'rewind-' and archive_get(rid)
  if not rows then return fail('NOREWIND', rid) end
  local items, why = put_back(cfg, rid, rows, nil)
  if not items then return why end
  event('rewind_undone', 'rewind_id', rid, 'items_restored', fmt(#items),
    'total_tokens_after', fmt(meta_get(F.TOKENS)))
  return #items
end

local no = refused()
if no then return no end
local reply
if mode == 'rewind' then reply = rewind(target) else reply = undo(target) end
if type(reply) ~= 'table' then rearm_ttl(cfg) end  -- done (a table is an error reply: nothing written)
return reply
