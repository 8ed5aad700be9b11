-- lib/calls.lua: what runs every call: binding its keys and arguments, stopping on a corrupt
-- stored value, and running a script that takes no request (run_plain; lib/requests.lua runs
-- those that do).
-- needs: core

-- `fn`'s reply and record, or nil and the CORRUPT reply when it stopped on a stored value in a
-- shape no script writes (corrupt() in lib/core.lua) or on a key of another type than the
-- scripts write; any other error stops the script as it is.
local function guarded(fn, ...)
  local ok, reply, record = pcall(fn, ...)
  if ok then return reply, record end
  local stopped = corruption_of(reply)
  if not stopped then error(reply, 0) end
  return nil, stopped
end

-- The keys of a script that takes some of the window keys, each in its place of them (lib/core.lua):
-- slots[i] is the place of keys[i] (drivers/scripts.py writes them from the script's KEYS line).
-- The others stay nil, so a script that touches a key it did not name fails loudly.
local function in_place(keys, slots)
  local out = {}
  for i, s in ipairs(slots) do out[s] = keys[i] end
  return out
end

-- Bind a call's keys and arguments and start its state afresh (lib/core.lua, lib/meta.lua).
local function begin_call(keys, args)
  KEYS, ARGV = keys, args
  K_META, K_ITEMS, K_ORDER, K_FIFO, K_PINNED, K_ATTRS, K_EVENTS, K_REQUESTS, K_REPLIES =
    keys[1], keys[2], keys[3], keys[4], keys[5], keys[6], keys[7], keys[8], keys[9]
  K_GROUPS, K_CALLS, K_ARCHIVE, K_VECTORS, K_LEASE, K_TURN = keys[10], keys[11], keys[12], keys[13], keys[14], keys[15]
  K_BLOBS, K_SIZES = keys[16], keys[17]
  REQUEST = table.remove(args, 1) or ''
  WROTE, CFG, COUNTERS_KNOWN, NOW_US = false, nil, false, nil
  RUN = {compactions = 0, freed = 0, invalidated = 0}
  META_KNOWN, META_DELTA, META_DIRTY = {}, {}, {}
end

-- Run the main() of a script that takes no request (the reads, event.lua: they record no reply
-- and change no counter) for one call: its keys and args bound, its reply as it is. An EVAL script
-- that runs so carries none of the request protocol (lib/requests.lua), which its EVALSHA would
-- re-create on every call.
local function run_plain(main, keys, args)
  begin_call(keys, args)
  if REQUEST ~= '' then return fail('BADARG', 'request') end
  local reply, stopped = guarded(main)
  return reply == nil and stopped or reply
end
