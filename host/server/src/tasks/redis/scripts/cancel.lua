local found = redis.call('HMGET', KEYS[1], 'subject', 'status')
if not found[1] or (ARGV[2] ~= '1' and found[1] ~= ARGV[1]) then return 0 end
if found[2] == 'working' or found[2] == 'input_required' then
  redis.call('HDEL', KEYS[1], 'input', 'input_key', 'answer', 'answer_key')
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'updated', ARGV[3], 'ended', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  redis.call('PUBLISH', ARGV[5], ARGV[6])
end
return 1
