local status = redis.call('HGET', KEYS[1], 'status')
if status and status ~= 'working' and status ~= 'input_required' then return 0 end
if not status then
  redis.call('HSET', KEYS[1], 'subject', ARGV[5], 'created', ARGV[6])
  redis.call('ZADD', KEYS[2], ARGV[6], ARGV[7])
end
redis.call('HDEL', KEYS[1], 'input', 'input_key', 'answer', 'answer_key')
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'payload', ARGV[2], 'updated', ARGV[3], 'ended', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
local size = string.len(ARGV[2])
local old = redis.call('HGET', KEYS[3], ARGV[7])
if old then redis.call('DECRBY', KEYS[4], old) end
redis.call('HSET', KEYS[3], ARGV[7], size)
redis.call('INCRBY', KEYS[4], size)
local max = tonumber(ARGV[10])
local fits = function() return (tonumber(redis.call('GET', KEYS[4])) or 0) <= max end
make_room(KEYS[2], KEYS[3], KEYS[4], ARGV[8], tonumber(ARGV[3]), tonumber(ARGV[9]), fits, ARGV[7])
return 1
