-- A lease's execution waits for a human and its deadline moved: KEYS as in
-- quota_admit.lua; ARGV: the lease, and how long it lasts from now (ms). A
-- lease still held that would end sooner ends then; one gone stays gone.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local lease, lease_ms = ARGV[1], tonumber(ARGV[2])
local ends = redis.call('ZSCORE', KEYS[2], lease)
if not ends or tonumber(ends) >= now + lease_ms then
  return 0
end
redis.call('ZADD', KEYS[2], 'XX', now + lease_ms, lease)
for _, key in ipairs({KEYS[2], KEYS[3]}) do
  if redis.call('PTTL', key) < lease_ms then
    redis.call('PEXPIRE', key, lease_ms)
  end
end
return 1
