-- state.get: KEYS[1] the owner's values, KEYS[2] its meta; ARGV: key, now
-- (ms). The value, or false when the key has none or it expired.
local meta = redis.call('HGET', KEYS[2], ARGV[1])
if not meta then
  return false
end
local e = tonumber(string.match(meta, '^(%d+) '))
if e ~= 0 and e <= tonumber(ARGV[2]) then
  return false
end
return redis.call('HGET', KEYS[1], ARGV[1])
