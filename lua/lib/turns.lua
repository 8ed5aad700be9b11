-- lib/turns.lua: turn leases with fencing (docs/turns.md). A window's :turn hash holds the
-- running turn (token, until: the server ms its lease runs to, lease: its length in ms, owner,
-- started, policy, ids: what it wrote, space-separated) and the inputs enqueued for it or the
-- next turn (pending: a JSON array of add.lua item groups of ITEM_ARGS strings).
-- needs: meta

local TURN_POLICIES = {reject = true, enqueue = true, interrupt = true, rollback = true}
local TURN_FIELDS = {'token', 'until', 'lease', 'owner', 'started', 'policy', 'ids'}

-- The turn holding the window's lease, or nil (none, or its lease ran out).
local function running_turn()
  local f = redis.call('HMGET', K_TURN, unpack(TURN_FIELDS))
  if not f[1] or not f[2] then return nil end
  local until_ms = stored_int(K_TURN, 'until', f[2], 0, 2 ^ 53)
  if until_ms <= now_ms() then return nil end
  return {token = f[1], until_ms = until_ms, lease = stored_int(K_TURN, 'lease', f[3], 0, 86400000), owner = f[4] or '',
    started = stored_int(K_TURN, 'started', f[5], 0, 2 ^ 53), policy = f[6], ids = f[7] or ''}
end

-- The ids a running turn wrote that are still in the window, as a set (compaction keeps them).
local function running_turn_ids()
  local turn, out = running_turn(), {}
  for _, id in ipairs(turn and words(turn.ids) or {}) do out[id] = true end
  return out
end

-- The inputs enqueued so far: a list of item groups of ITEM_ARGS (8 when an older client enqueued them).
local function pending_inputs()
  local json = redis.call('HGET', K_TURN, 'pending')
  if not json then return {} end
  local pending = stored_object(K_TURN, 'pending', json)
  for _, group in ipairs(pending) do
    if type(group) ~= 'table' then corrupt(K_TURN, 'pending', 'an input that is not a list') end
    for _, v in ipairs(group) do
      if type(v) ~= 'string' then corrupt(K_TURN, 'pending', 'an input field that is not a string') end
    end
  end
  return pending
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
  if not turn or turn.token == b.token then return plan end
  if b.policy == 'reject' then
    event('turn_conflict', 'token', b.token, 'outcome', 'rejected', 'holder', turn.owner)
    return nil, fail('TURNBUSY', turn.owner, fmt(turn.until_ms - now_ms()))
  end
  plan.take = false
  if b.policy == 'enqueue' then
    plan.queue = true
    return plan
  end
  plan.replaced = turn
  if b.policy == 'rollback' then
    plan.rollback = {}
    for _, id in ipairs(words(turn.ids)) do
      if redis.call('HEXISTS', K_ITEMS, id) == 1 then plan.rollback[#plan.rollback + 1] = id end
    end
  end
  return plan
end

-- The pending inputs go in ahead of the call's own items: ARGV[base] counts them too. Returns
-- how many items were taken.
local function splice_pending(base)
  local pending = pending_inputs()
  if #pending == 0 then return 0 end
  local at = base + 1
  for _, group in ipairs(pending) do
    for j = 1, ITEM_ARGS do
      table.insert(ARGV, at, group[j] or '')
      at = at + 1
    end
  end
  ARGV[base] = tostring(tonumber(ARGV[base]) + #pending)
  return #pending
end

-- Store the call's own items (ARGV[base + 1 ...], groups of ITEM_ARGS) as pending; the QUEUED reply.
local function enqueue_inputs(base, n, plan)
  local pending = pending_inputs()
  for i = 1, n do
    local group = {}
    for j = 1, ITEM_ARGS do group[j] = ARGV[base + (i - 1) * ITEM_ARGS + j] end
    pending[#pending + 1] = group
  end
  redis.call('HSET', K_TURN, 'pending', cjson.encode(pending))
  event('turn_conflict', 'token', plan.token, 'outcome', 'enqueued', 'holder', plan.begin.owner, 'pending', fmt(#pending))
  return fail('QUEUED', fmt(#pending))
end

-- After an add's writes (`add`: add.lua's plan): the lease (begun, or renewed by this write of
-- the turn) and what the turn wrote; the events of a turn begun, taken over or rolled back.
local function apply_turn(plan, add)
  if not plan.token then return end
  local added_ids = {}
  for _, a in ipairs(add.added) do
    if not add.removed[a.id] then added_ids[#added_ids + 1] = a.id end
  end
  local now = now_ms()
  if plan.take then redis.call('HDEL', K_TURN, 'pending') end
  if plan.begin then
    local b, old = plan.begin, plan.replaced
    if old then
      event(plan.rollback and 'turn_rolled_back' or 'turn_interrupted', 'token', old.token, 'owner', old.owner,
        'by', b.owner, 'item_ids', plan.rollback and table.concat(plan.rollback, ' ') or old.ids)
    end
    redis.call('HSET', K_TURN, 'token', b.token, 'until', fmt(now + b.lease), 'lease', fmt(b.lease), 'owner', b.owner,
      'started', fmt(now), 'policy', b.policy, 'ids', table.concat(added_ids, ' '))
    event('turn_started', 'token', b.token, 'owner', b.owner, 'policy', b.policy, 'lease_ms', fmt(b.lease),
      'took_over', old and old.owner or '', 'item_ids', table.concat(added_ids, ' '))
    return
  end
  local ids = plan.current.ids
  if #added_ids > 0 then ids = (ids == '' and '' or ids .. ' ') .. table.concat(added_ids, ' ') end
  redis.call('HSET', K_TURN, 'until', fmt(now + plan.lease), 'ids', ids)
end

-- End turn `token`: {1, pending inputs left} (its turn_ended event), or {0, pending} when it no
-- longer held the lease.
local function end_turn(token, outcome)
  local turn, left = running_turn(), #pending_inputs()
  if not turn or turn.token ~= token then return {0, left} end
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
