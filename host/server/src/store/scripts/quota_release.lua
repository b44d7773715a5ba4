-- The end of an admitted execution: KEYS as in quota_admit.lua; ARGV: its
-- lease, and the native calls it made and the fuel it burned. Its lease goes,
-- and what it reserved and did not spend is given back, unless the day
-- changed; a lease gone already (ended at its deadline, or this script sent
-- again after its answer was lost) gives nothing, and is remembered for an
-- hour as released, so that an admission of it still queued (its answer
-- lost) counts nothing. Returns 1 when it gave back, 0 when the lease was
-- gone.
redis.call('ZREM', KEYS[2], ARGV[1])
local held = redis.call('HGET', KEYS[3], ARGV[1])
if not held then
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  redis.call('ZADD', KEYS[4], now + 3600000, ARGV[1])
  if redis.call('PTTL', KEYS[4]) < 3600000 then
    redis.call('PEXPIRE', KEYS[4], 3600000)
  end
  return 0
end
redis.call('HDEL', KEYS[3], ARGV[1])
local d, c, f = string.match(held, '^(%d+) (%-?%d+) (%-?%d+)$')
local day = tonumber(d)
local function give_back(name, reserved, spent)
  if reserved < 0 then
    return
  end
  local amount = reserved - spent
  if amount <= 0 then
    return
  end
  local count = redis.call('HGET', KEYS[1], name)
  if not count then
    return
  end
  local w, u = string.match(count, '^(%d+) (%d+)$')
  if tonumber(w) ~= day then
    return
  end
  redis.call('HSET', KEYS[1], name, string.format('%.0f %.0f', day, math.max(0, tonumber(u) - amount)))
end
give_back('native-calls-per-day', tonumber(c), tonumber(ARGV[2]))
give_back('fuel-per-day', tonumber(f), tonumber(ARGV[3]))
return 1
