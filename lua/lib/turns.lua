-- lib/turns.lua: turn leases with fencing (docs/turns.md). A window's :turn hash holds the
-- running turn (token, until: the server ms its lease runs to, lease: its length in ms, owner,
-- started, policy, ids: what it wrote, inputs: the inputs it answers, space-separated), the inputs
-- of turns that ended without an answer (unanswered: ids) and the inputs enqueued for it or the
-- next turn (each in a field 'p:<n>': a JSON array of an add.lua item group of ITEM_ARGS strings;
-- pending_next, pending_count, pending_bytes: their counters; see pending_inputs).
-- needs: items

local TURN_POLICIES = {reject = true, enqueue = true, interrupt = true, rollback = true}
local TURN_FIELDS = {'token', 'until', 'lease', 'owner', 'started', 'policy', 'ids', 'inputs'}

-- The turn holding the window's lease, or nil (none, or its lease ran out).
local function running_turn()
  local f = redis.call('HMGET', K_TURN, unpack(TURN_FIELDS))
  if not f[1] or not f[2] then return nil end
  local until_ms = stored_int(K_TURN, 'until', f[2], 0, 2 ^ 53)
  if until_ms <= now_ms() then return nil end
  return {token = f[1], until_ms = until_ms, lease = stored_int(K_TURN, 'lease', f[3], 0, 86400000), owner = f[4] or '',
    started = stored_int(K_TURN, 'started', f[5], 0, 2 ^ 53), policy = f[6], ids = f[7] or '', inputs = f[8] or ''}
end

-- The inputs a new turn takes over, with nothing written: those of turns that ended without an
-- answer ('unanswered': an error ended them), of the turn whose lease ran out (its fields are still
-- there) and of the turn this one interrupts (`replaced`; a rollback removes them); those still in
-- the window, oldest first. Returns their ids and entries (raw_entry, checked as a reply's).
local function unanswered_inputs(replaced, rolled_back)
  local f = redis.call('HMGET', K_TURN, 'unanswered', 'token', 'inputs')
  local ids = words(f[1])
  if f[2] and not rolled_back then
    for _, id in ipairs(words(replaced and replaced.inputs or f[3])) do ids[#ids + 1] = id end
  end
  local seen, out, entries = {}, {}, {}
  for _, id in ipairs(ids) do
    if not seen[id] then
      seen[id] = true
      local e = raw_item(id)
      if e then
        check_body(id, e[2])
        out[#out + 1], entries[#entries + 1] = id, e
      end
    end
  end
  table.sort(entries, function(x, y) return unpack_attrs(x[3], x[1]).seq < unpack_attrs(y[3], y[1]).seq end)
  for i, e in ipairs(entries) do out[i] = e[1] end
  return out, entries
end

-- The ids a running turn wrote that are still in the window, as a set (compaction keeps them).
local function running_turn_ids()
  local turn, out = running_turn(), {}
  for _, id in ipairs(turn and words(turn.ids) or {}) do out[id] = true end
  return out
end

-- The inputs waiting for a turn, oldest first: {fields, groups (each ITEM_ARGS strings), count,
-- bytes}. Each waits in a field of its own ('p:<n>', n counting up), so that enqueueing one costs
-- the same however many wait; 'pending' (a JSON array of them all) is how a version before this
-- one kept them, still taken first. corrupt() for one in another shape.
local function pending_inputs()
  local flat, found, groups, fields = redis.call('HGETALL', K_TURN), {}, {}, {}
  local function group_of(field, json)
    local g = stored_object(K_TURN, field, json)
    for _, v in ipairs(g) do
      if type(v) ~= 'string' then corrupt(K_TURN, field, 'an input field that is not a string') end
    end
    return g
  end
  for i = 1, #flat, 2 do
    local f = flat[i]
    local n = string.match(f, '^p:(%d+)$')
    if n then
      found[#found + 1] = {tonumber(n), f, flat[i + 1]}
    elseif f == 'pending' then
      for _, g in ipairs(stored_object(K_TURN, f, flat[i + 1])) do
        if type(g) ~= 'table' then corrupt(K_TURN, f, 'an input that is not a list') end
        groups[#groups + 1] = group_of(f, cjson.encode(g))
      end
      fields[#fields + 1] = f
    end
  end
  table.sort(found, function(x, y) return x[1] < y[1] end)
  for _, e in ipairs(found) do
    groups[#groups + 1] = group_of(e[2], e[3])
    fields[#fields + 1] = e[2]
  end
  return {fields = fields, groups = groups}
end

-- How many inputs wait, and their bytes (the counters enqueue_inputs keeps; 0 when none).
local function pending_size()
  local f = redis.call('HMGET', K_TURN, 'pending_count', 'pending_bytes', 'pending')
  local count = stored_int(K_TURN, 'pending_count', f[1], 0, 2 ^ 53)
  if f[3] then count = count + #stored_object(K_TURN, 'pending', f[3]) end  -- an earlier version's
  return count, stored_int(K_TURN, 'pending_bytes', f[2], 0, 2 ^ 53)
end

-- The conditions of a write ('v=<version>', 't=<token>' (a write of that running turn),
-- 'b=<token>,<policy>,<lease ms>,<owner>' (begin a turn), 'p=1' (take the pending inputs),
-- space-separated): a table, or nil and an error reply.
local function parse_conditions(s)
  local c = {}
  for w in string.gmatch(s, '%S+') do
    local k, v = string.match(w, '^(%a)=(.*)$')
    if k == 'v' and string.match(v, '^[%d%.]*$') then
      c.version = v
    elseif k == 't' and string.match(v, '^%x+$') then
      c.fence = v
    elseif k == 'b' then
      local token, policy, lease, owner = string.match(v, '^(%x+),(%a+),(%d+),([^,]+)$')
      lease = tonumber(lease)
      if not token or not TURN_POLICIES[policy] or not is_int(lease, 1, 86400000) then return nil, fail('BADARG', 'turn') end
      c.begin = {token = token, policy = policy, lease = lease, owner = owner}
    elseif k == 'p' and v == '1' then
      c.take = true
    else
      return nil, fail('BADARG', 'conditions')
    end
  end
  if (c.fence and c.begin) or (c.take and not (c.fence or c.begin)) then return nil, fail('BADARG', 'conditions') end
  return c
end

-- A write of turn `token` that no longer holds the lease: the conflict event and the error.
local function turn_lost(token, turn)
  local why = turn and 'taken over' or 'expired'
  event('turn_conflict', 'token', token, 'outcome', 'lost', 'holder', turn and turn.owner or '')
  return fail('TURNLOST', why)
end

-- What the conditions ask of the turn lease (nothing written): {token, begin, take, queue,
-- replaced (the turn fenced off), rollback (its ids still stored)}, or nil and an error reply.
local function plan_turn(c)
  if not (c.fence or c.begin) then return {} end
  local turn = running_turn()
  if c.fence then
    if not turn or turn.token ~= c.fence then return nil, turn_lost(c.fence, turn) end
    return {token = c.fence, take = c.take, lease = turn.lease, current = turn}
  end
  local b = c.begin
  local plan = {token = b.token, begin = b, take = true, lease = b.lease}
  if turn and turn.token == b.token then return plan end
  if not turn then
    plan.handed_ids, plan.handed = unanswered_inputs(nil, false)
    return plan
  end
  if b.policy == 'reject' then
    event('turn_conflict', 'token', b.token, 'outcome', 'rejected', 'holder', turn.owner)
    return nil, fail('TURNBUSY', turn.owner, fmt(turn.until_ms - now_ms()))
  end
  plan.take = false
  if b.policy == 'enqueue' then
    plan.queue, plan.holder = true, turn
    return plan
  end
  plan.replaced = turn
  if b.policy == 'rollback' then
    plan.rollback = {}
    for _, id in ipairs(words(turn.ids)) do
      if redis.call('HEXISTS', K_ITEMS, id) == 1 then plan.rollback[#plan.rollback + 1] = id end
    end
  end
  plan.handed_ids, plan.handed = unanswered_inputs(turn, b.policy == 'rollback')
  return plan
end

-- The pending inputs go in ahead of the call's own items: ARGV[base] counts them too; the
-- fields that held them go into `plan.taken` (apply_turn deletes them). Returns how many items
-- were taken.
local function splice_pending(base, plan)
  local pending = pending_inputs()
  plan.taken, plan.taken_bodies = pending.fields, {}
  if #pending.groups == 0 then return 0 end
  local at = base + 1
  for _, group in ipairs(pending.groups) do
    plan.taken_bodies[#plan.taken_bodies + 1] = group[2]
    for j = 1, ITEM_ARGS do
      table.insert(ARGV, at, group[j] or '')
      at = at + 1
    end
  end
  ARGV[base] = tostring(tonumber(ARGV[base]) + #pending.groups)
  return #pending.groups
end

-- Store the call's own items (ARGV[base + 1 ...], groups of ITEM_ARGS) as pending, each in a field
-- of its own; the QUEUED reply, or QUEUEFULL (nothing written) when they would take the queue past
-- PENDING.max_inputs inputs or PENDING.max_bytes bytes.
local function enqueue_inputs(base, n, plan)
  local count, bytes = pending_size()
  local groups, bodies, size = {}, {}, 0
  for i = 1, n do
    local group = {}
    for j = 1, ITEM_ARGS do
      group[j] = ARGV[base + (i - 1) * ITEM_ARGS + j]
      size = size + #group[j]
    end
    groups[i], bodies[i] = cjson.encode(group), group[2]
  end
  if count + n > PENDING.max_inputs or bytes + size > PENDING.max_bytes then
    local holder = plan.holder
    return fail('QUEUEFULL', holder.owner, fmt(holder.until_ms - now_ms()), fmt(count), fmt(bytes),
      fmt(PENDING.max_inputs), fmt(PENDING.max_bytes))
  end
  local last = redis.call('HINCRBY', K_TURN, 'pending_next', n)
  local fields = {}
  for i, json in ipairs(groups) do
    fields[#fields + 1], fields[#fields + 2] = 'p:' .. fmt(last - n + i), json
  end
  redis.call('HSET', K_TURN, 'pending_count', fmt(count + n), 'pending_bytes', fmt(bytes + size), unpack(fields))
  count_blobs(bodies, 1)  -- a waiting input keeps its blobs too
  event('turn_conflict', 'token', plan.token, 'outcome', 'enqueued', 'holder', plan.begin.owner, 'pending',
    fmt(count + n))
  return fail('QUEUED', fmt(count + n))
end

-- After an add's writes (`add`: add.lua's plan; `inputs`: the ids of the inputs this call took,
-- pending or its own): the lease (begun, or renewed by this write of the turn), what the turn wrote
-- and the inputs it answers; the events of a turn begun, taken over or rolled back.
local function apply_turn(plan, add, inputs)
  if not plan.token then return end
  local added_ids = {}
  for _, a in ipairs(add.added) do
    if not add.removed[a.id] then added_ids[#added_ids + 1] = a.id end
  end
  local now = now_ms()
  if plan.take and #(plan.taken or {}) > 0 then
    redis.call('HDEL', K_TURN, 'pending_count', 'pending_bytes', unpack(plan.taken))
    count_blobs(plan.taken_bodies or {}, -1)  -- (stored now: store_item counted them again)
  end
  if plan.begin then
    local b, old = plan.begin, plan.replaced
    if old then
      event(plan.rollback and 'turn_rolled_back' or 'turn_interrupted', 'token', old.token, 'owner', old.owner,
        'by', b.owner, 'item_ids', plan.rollback and table.concat(plan.rollback, ' ') or old.ids)
    end
    local taken = {unpack(plan.handed_ids or {})}
    for _, id in ipairs(inputs) do taken[#taken + 1] = id end
    redis.call('HDEL', K_TURN, 'unanswered')
    redis.call('HSET', K_TURN, 'token', b.token, 'until', fmt(now + b.lease), 'lease', fmt(b.lease), 'owner', b.owner,
      'started', fmt(now), 'policy', b.policy, 'ids', table.concat(added_ids, ' '), 'inputs', table.concat(taken, ' '))
    event('turn_started', 'token', b.token, 'owner', b.owner, 'policy', b.policy, 'lease_ms', fmt(b.lease),
      'took_over', old and old.owner or '', 'item_ids', table.concat(added_ids, ' '))
    return
  end
  local ids, taken = plan.current.ids, plan.current.inputs
  if #added_ids > 0 then ids = (ids == '' and '' or ids .. ' ') .. table.concat(added_ids, ' ') end
  if #inputs > 0 then taken = (taken == '' and '' or taken .. ' ') .. table.concat(inputs, ' ') end
  redis.call('HSET', K_TURN, 'until', fmt(now + plan.lease), 'ids', ids, 'inputs', taken)
end

-- End turn `token`: {1, pending inputs left} (its turn_ended event), or {0, pending} when it no
-- longer held the lease. A turn that ended with an error leaves its inputs unanswered: the next
-- turn takes them over (unanswered_inputs).
local function end_turn(token, outcome)
  local turn, left = running_turn(), pending_size()
  if not turn or turn.token ~= token then return {0, left} end
  if outcome ~= 'ok' and turn.inputs ~= '' then
    local before = redis.call('HGET', K_TURN, 'unanswered')
    redis.call('HSET', K_TURN, 'unanswered', before and (before .. ' ' .. turn.inputs) or turn.inputs)
  end
  redis.call('HDEL', K_TURN, unpack(TURN_FIELDS))
  event('turn_ended', 'token', token, 'owner', turn.owner, 'outcome', outcome,
    'duration_ms', fmt(now_ms() - turn.started), 'item_ids', turn.ids, 'pending', fmt(left))
  return {1, left}
end

-- Extend turn `token`'s lease by `lease` ms from now: 1, or the TURNLOST reply.
local function renew_turn(token, lease)
  local turn = running_turn()
  if not turn or turn.token ~= token then return turn_lost(token, turn) end
  redis.call('HSET', K_TURN, 'until', fmt(now_ms() + lease), 'lease', fmt(lease))
  return 1
end
