-- delete.lua: delete every key of a window, its request log too (a request id used before the
-- delete is new after it; this delete's own reply is the new log's first record).
-- needs: requests
-- KEYS: the window keys (lib/core.lua).
-- Reply: 1 if the window existed, else 0.
local existed = redis.call('EXISTS', K_META)
redis.call('UNLINK', unpack(all_keys()))  -- freed off the main thread: no pause at any size
if existed == 1 then
  WROTE = true
  forget_requests()  -- a delete of nothing keeps the log (the first delete's record answers its retries)
end
return existed
