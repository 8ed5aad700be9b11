-- lib/reads.lua: what the read scripts share (no writes, no TTL re-arm).
-- needs: items
--
-- Each read replies {meta as a flat field/value array (empty if the window does not exist),
-- pinned count, {item...}, ...}: each item {id, stored JSON, attrs, pinned 1/0} (raw_entry in
-- lib/items.lua; the client puts them together). An item stored in a shape no script writes
-- makes the reply {'!', 'CORRUPT', key, field, what}.

-- The window's :meta as a flat array and its pinned count; nil when the window does not exist.
local function window_head()
  local meta = redis.call('HGETALL', K_META)
  if #meta == 0 then return nil end
  return meta, redis.call('SCARD', K_PINNED)
end

-- The entries of `ids` (raw_entry), in order, while their stored JSON fits `budget` bytes (0:
-- any; at least one is sent), read 64 at a time; returns the entries, the ids left over, and
-- the first id stored in a shape no script writes (nil if none).
local function contents(ids, budget)
  if budget <= 0 then
    local out, bad = raw_items(ids)
    return out, {}, bad
  end
  local out, used, wholes = {}, 0, whole_items(#ids)
  for i = 1, #ids, 64 do
    local chunk, bad = raw_items({unpack(ids, i, math.min(i + 63, #ids))}, wholes)
    if bad then return out, {}, bad end
    for j, e in ipairs(chunk) do
      local n = e and #e[2] or 0
      if #out > 0 and used + n > budget then
        local rest = {}
        for k = i + j - 1, #ids do rest[#rest + 1] = ids[k] end
        return out, rest, nil
      end
      used, out[#out + 1] = used + n, e
    end
  end
  return out, {}, nil
end

-- where the page after this one starts, -1 when this one ends the listing
local function next_page(first, page, total)
  return (page > 0 and first + page < total) and first + page or -1
end
