-- state.delete: KEYS[1] the owner's values, KEYS[2] its meta, KEYS[3] its
-- usage; ARGV: key, now (ms). Returns 1 when the key had a live value, else 0
-- (an expired one is removed too).
local meta = redis.call('HGET', KEYS[2], ARGV[1])
if not meta then
  return 0
end
local e, s = string.match(meta, '^(%d+) (%d+)$')
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HINCRBY', KEYS[3], 'keys', -1)
redis.call('HINCRBY', KEYS[3], 'bytes', -tonumber(s))
if tonumber(e) ~= 0 and tonumber(e) <= tonumber(ARGV[2]) then
  return 0
end
return 1
