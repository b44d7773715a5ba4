-- state.delete: KEYS[1] the owner's values, KEYS[2] its meta, KEYS[3] its
-- usage; ARGV: key. Returns 1 when the key had a live value, else 0 (an
-- expired one is removed too). The usage never goes below zero.
local meta = redis.call('HGET', KEYS[2], ARGV[1])
if not meta then
  return 0
end
local e, s = string.match(meta, '^(%d+) (%d+)$')
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 1 then
  local usage = redis.call('HMGET', KEYS[3], 'keys', 'bytes')
  local keys = math.max(0, tonumber(usage[1] or '0') - 1)
  local bytes = math.max(0, tonumber(usage[2] or '0') - tonumber(s))
  redis.call('HSET', KEYS[3], 'keys', string.format('%.0f', keys), 'bytes', string.format('%.0f', bytes))
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if tonumber(e) ~= 0 and tonumber(e) <= now then
  return 0
end
return 1
