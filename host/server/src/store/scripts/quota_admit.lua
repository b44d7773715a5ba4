-- A quota admission: KEYS[1] the owner's counts (quota name -> "window used"),
-- KEYS[2] its admitted executions' leases (a sorted set scored by when each
-- ends, in ms since the epoch), KEYS[3] what each lease reserved (lease ->
-- "day calls fuel", -1 for a quota the owner did not have), KEYS[4] the
-- leases released before their admission ran (a sorted set scored by when
-- that is forgotten: an admission whose answer was lost is released at once,
-- and a copy of it still queued must then count nothing). ARGV: lease,
-- lease ms, then the limits of executions-per-minute, native-calls-per-day,
-- fuel-per-day and concurrent-executions (-1 for none), then the native calls
-- and the fuel the execution's budgets allow (at most 2^53, exact in Lua).
-- Time is Redis's own, so replicas with skewed clocks count the same windows.
-- The rules are those of `quota.rs`: every quota is checked before anything is
-- counted, and a lease admitted already (this script sent again after its
-- answer was lost) gets its first answer. Returns {'granted', calls, fuel}
-- (-1: no such quota) or {'refused', quota, ms until it allows more}.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local lease, lease_ms = ARGV[1], tonumber(ARGV[2])
local per_minute, calls_per_day = tonumber(ARGV[3]), tonumber(ARGV[4])
local fuel_per_day, concurrent = tonumber(ARGV[5]), tonumber(ARGV[6])
local want_calls, want_fuel = tonumber(ARGV[7]), tonumber(ARGV[8])
local minute, day = math.floor(now / 60000), math.floor(now / 86400000)
local held = redis.call('HGET', KEYS[3], lease)
if held then
  local _, c, f = string.match(held, '^(%d+) (%-?%d+) (%-?%d+)$')
  return {'granted', tonumber(c), tonumber(f)}
end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
if redis.call('ZSCORE', KEYS[4], lease) then
  return {'granted', -1, -1}
end
local ended = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for i = 1, #ended do
  redis.call('ZREM', KEYS[2], ended[i])
  redis.call('HDEL', KEYS[3], ended[i])
end
if concurrent >= 0 and redis.call('ZCARD', KEYS[2]) >= concurrent then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {'refused', 'concurrent-executions', math.max(0, tonumber(first[2]) - now)}
end
local function used(name, window)
  local count = redis.call('HGET', KEYS[1], name)
  if not count then
    return 0
  end
  local w, u = string.match(count, '^(%d+) (%d+)$')
  if tonumber(w) ~= window then
    return 0
  end
  return tonumber(u)
end
local started = used('executions-per-minute', minute)
if per_minute >= 0 and started >= per_minute then
  return {'refused', 'executions-per-minute', (minute + 1) * 60000 - now}
end
local day_ends = (day + 1) * 86400000 - now
local calls, calls_spent = -1, used('native-calls-per-day', day)
if calls_per_day >= 0 then
  if calls_spent >= calls_per_day then
    return {'refused', 'native-calls-per-day', day_ends}
  end
  calls = math.min(want_calls, calls_per_day - calls_spent)
end
local fuel, fuel_spent = -1, used('fuel-per-day', day)
if fuel_per_day >= 0 then
  if fuel_spent >= fuel_per_day then
    return {'refused', 'fuel-per-day', day_ends}
  end
  fuel = math.min(want_fuel, fuel_per_day - fuel_spent)
end
redis.call('ZADD', KEYS[2], now + lease_ms, lease)
redis.call('HSET', KEYS[3], lease, string.format('%.0f %.0f %.0f', day, calls, fuel))
for _, key in ipairs({KEYS[2], KEYS[3]}) do
  if redis.call('PTTL', key) < lease_ms then
    redis.call('PEXPIRE', key, lease_ms)
  end
end
local function count(limit, name, window, value)
  if limit >= 0 then
    redis.call('HSET', KEYS[1], name, string.format('%.0f %.0f', window, value))
  end
end
count(per_minute, 'executions-per-minute', minute, started + 1)
count(calls_per_day, 'native-calls-per-day', day, calls_spent + math.max(calls, 0))
count(fuel_per_day, 'fuel-per-day', day, fuel_spent + math.max(fuel, 0))
-- Counts older than a day count nothing: the hash goes when nobody runs.
redis.call('PEXPIRE', KEYS[1], 2 * 86400000)
return {'granted', calls, fuel}
