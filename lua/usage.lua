-- usage.lua: record what the provider reported for the build of one version of the window (§20).
-- needs: meta events
-- KEYS: the window keys (lib/core.lua). A missing window is not made.
-- ARGV[1]: the version a build reported (contextstore checked its form); ARGV[2..5]: the input,
--   output, cache-read and cache-write tokens reported (integers from 0); ARGV[6]: the model
--   ('' none).
-- The totals grow by them. The prompt as the provider counted it (input + cache read + cache
--   write) over what the build of that version estimated (the total_tokens of the newest `built`
--   event naming the version among the last USAGE.lookback events; none there: no ratio) joins the
--   last USAGE.samples ratios, and the window's calibration becomes the largest of them,
--   clamped to USAGE.calibration_min..CALIBRATION_MAX: a budget rather too small than a prompt the
--   provider refuses. A calibration that changed starts a new epoch (the budgets changed).
-- Refused with nothing written: {'!', 'NOTVERSION', version} when the window does not exist or
--   the version is not one it reported (another lifetime's or another window's, or ahead of it).
-- Reply: {calibration, ratio} as text (ratio '' when no build of that version was found).

-- The tokens the newest `built` event of `version` estimated, or nil.
local function estimated(version)
  local last, seen = '+', 0
  while seen < USAGE.lookback do
    local page = redis.call('XREVRANGE', K_EVENTS, last, '-', 'COUNT', 64)
    for _, entry in ipairs(page) do
      if entry[1] ~= last then
        local f = {}
        for i = 1, #entry[2], 2 do f[entry[2][i]] = entry[2][i + 1] end
        if f.event == 'built' and f.version == version then return tonumber(f.total_tokens) end
        seen = seen + 1
      end
    end
    if #page < 64 then return nil end
    last = page[#page][1]
  end
  return nil
end

-- Whether `version` is one the window reported: its lifetime, and no counter ahead of the window's.
local function reported(version)
  local i = 0
  for part in string.gmatch(version, '[^.]+') do
    i = i + 1
    local f = VERSION_FIELDS[i]
    if not f then return false end
    local mine = meta_get(f)
    if i == 1 and part ~= string.format('%d', mine) then return false end
    if tonumber(part) > mine then return false end
  end
  return i == #VERSION_FIELDS
end

-- The ratios kept (newest last) with `ratio` added, and the calibration they make.
local function calibrate(ratio)
  local kept = words(redis.call('HGET', K_META, F.RATIOS) or '')
  kept[#kept + 1] = string.format('%.4f', math.min(USAGE.calibration_max, math.max(USAGE.calibration_min, ratio)))
  while #kept > USAGE.samples do table.remove(kept, 1) end
  local most = USAGE.calibration_min
  for _, r in ipairs(kept) do
    local n = tonumber(r)
    if not (n and n >= USAGE.calibration_min and n <= USAGE.calibration_max) then corrupt(K_META, F.RATIOS, 'not ratios') end
    most = math.max(most, n)
  end
  return kept, most
end

local cfg = stored_config()
local version = ARGV[1]
if not cfg or not reported(version) then return fail('NOTVERSION', version) end
local used = {}
for i = 2, 5 do
  used[i - 1] = tonumber(ARGV[i])
  if not is_int(used[i - 1], 0, 2 ^ 53) then return fail('BADARG', 'tokens') end
end
local estimate = estimated(version)
local prompt = used[1] + used[3] + used[4]
local calibration, ratio = cfg.calibration, ''
if estimate and estimate > 0 and prompt > 0 then
  local kept
  kept, calibration = calibrate(prompt / estimate)
  ratio = kept[#kept]
  redis.call('HSET', K_META, F.RATIOS, table.concat(kept, ' '))
  if calibration ~= cfg.calibration then
    redis.call('HSET', K_META, F.CALIBRATION, string.format('%.4f', calibration))
    new_epoch()
  end
end
for i, f in ipairs({F.USED_INPUT, F.USED_OUTPUT, F.USED_CACHE_READ, F.USED_CACHE_WRITE}) do bump(f, used[i]) end
bump(F.USAGE_RECORDS, 1)
local fields = {'version', version, 'input_tokens', fmt(used[1]), 'output_tokens', fmt(used[2]),
  'cache_read_tokens', fmt(used[3]), 'cache_write_tokens', fmt(used[4]), 'model', ARGV[6],
  'token_calibration', string.format('%.4f', calibration)}
if estimate then fields[#fields + 1], fields[#fields + 2] = 'estimated_tokens', fmt(estimate) end
event('usage_recorded', unpack(fields))
rearm_ttl(cfg)
return {string.format('%.4f', calibration), ratio}
