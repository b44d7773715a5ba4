-- The end of an admitted execution: KEYS as in quota_admit.lua; ARGV: its
-- lease, the day its reservation was made in, and the native calls and fuel
-- it reserved and did not spend, given back unless the day changed.
redis.call('ZREM', KEYS[2], ARGV[1])
local day = tonumber(ARGV[2])
local function give_back(name, amount)
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
give_back('native-calls-per-day', tonumber(ARGV[3]))
give_back('fuel-per-day', tonumber(ARGV[4]))
return 1
