-- A call of a capability with quotas: KEYS[1] the owner's counts (as in
-- quota_admit.lua; a call quota's count is named "<quota> <capability>"),
-- KEYS[2] the calls counted in the last minute (a sorted set scored by when
-- each is forgotten), so that this script sent again after its answer was
-- lost (the connection's one retry) finds its call and counts it once.
-- ARGV: the call's ID, the capability (as its table names it), the limits of
-- calls-per-minute and calls-per-day (-1 for none, at most 2^53), then
-- 'count', or 'peek' to say whether a quota would refuse the call and change
-- nothing (asked before a human approves the call). Time is
-- Redis's own, so replicas with skewed clocks count the same windows. The
-- rules are those of `call_quota.rs`: every quota is checked before the call
-- is counted, and a refusal names the one that allows more last. Returns
-- {'counted'} or {'refused', quota, ms until it allows more}.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local call, capability = ARGV[1], ARGV[2]
local peek = ARGV[5] == 'peek'
if not peek then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZSCORE', KEYS[2], call) then
    return {'counted'}
  end
end
local quotas = {
  {'calls-per-minute', tonumber(ARGV[3]), 60000},
  {'calls-per-day', tonumber(ARGV[4]), 86400000},
}
local counted = {}
-- Of the quotas that refuse, the one that allows more last: no call runs
-- before then.
local refused, refused_ms = nil, -1
for _, quota in ipairs(quotas) do
  local name, most, window_ms = quota[1], quota[2], quota[3]
  if most >= 0 then
    local field = name .. ' ' .. capability
    local window = math.floor(now / window_ms)
    local used = 0
    local count = redis.call('HGET', KEYS[1], field)
    if count then
      local w, u = string.match(count, '^(%d+) (%d+)$')
      if tonumber(w) == window then
        used = tonumber(u)
      end
    end
    if used >= most and (window + 1) * window_ms - now > refused_ms then
      refused, refused_ms = name, (window + 1) * window_ms - now
    end
    counted[#counted + 1] = {field, window, used + 1}
  end
end
if refused then
  return {'refused', refused, refused_ms}
end
if peek then
  return {'counted'}
end
for _, count in ipairs(counted) do
  redis.call('HSET', KEYS[1], count[1], string.format('%.0f %.0f', count[2], count[3]))
end
redis.call('ZADD', KEYS[2], now + 60000, call)
redis.call('PEXPIRE', KEYS[2], 60000)
-- Counts older than a day count nothing: the hash goes when nobody runs.
redis.call('PEXPIRE', KEYS[1], 2 * 86400000)
return {'counted'}
