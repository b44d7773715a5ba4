local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'working' and status ~= 'input_required' then return 0 end
redis.call('HDEL', KEYS[1], 'answer', 'answer_key')
redis.call('HSET', KEYS[1], 'status', 'input_required', 'input', ARGV[2], 'input_key', ARGV[1], 'updated', ARGV[3], 'extended', ARGV[4])
redis.call('PEXPIREAT', KEYS[1], ARGV[5])
return 1
