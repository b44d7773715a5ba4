local max = tonumber(ARGV[4])
local fits = function() return redis.call('ZCARD', KEYS[1]) < max end
if not make_room(KEYS[1], KEYS[2], KEYS[3], ARGV[6], tonumber(ARGV[3]), tonumber(ARGV[7]), fits, '') then
  return 0
end
redis.call('HSET', KEYS[4], 'subject', ARGV[2], 'status', 'working', 'created', ARGV[3], 'updated', ARGV[3])
redis.call('PEXPIRE', KEYS[4], ARGV[5])
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
