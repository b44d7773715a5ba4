local f = redis.call('HMGET', KEYS[1], 'status', 'input_key', 'answer_key')
if f[1] == 'input_required' and f[2] == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'input', 'input_key')
  redis.call('HSET', KEYS[1], 'status', 'working', 'updated', ARGV[2])
end
if f[3] == ARGV[1] then redis.call('HDEL', KEYS[1], 'answer', 'answer_key') end
if ARGV[3] ~= '' and (f[1] == 'working' or f[1] == 'input_required') then
  redis.call('HSET', KEYS[1], 'extended', ARGV[3])
  redis.call('PEXPIREAT', KEYS[1], ARGV[4])
end
return 1
