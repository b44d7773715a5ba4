-- state.get: KEYS[1] the owner's values, KEYS[2] its meta; ARGV: key. The
-- value, or false when the key has none or it expired (by Redis's clock).
local meta = redis.call('HGET', KEYS[2], ARGV[1])
if not meta then
  return false
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local e = tonumber(string.match(meta, '^(%d+) '))
if e ~= 0 and e <= now then
  return false
end
return redis.call('HGET', KEYS[1], ARGV[1])
