local f = redis.call('HMGET', KEYS[1], 'subject', 'status', 'input_key')
if not f[1] or f[1] ~= ARGV[1] then return 0 end
if f[2] == 'input_required' then
  for i = 5, #ARGV - 1, 2 do
    if ARGV[i] == f[3] then
      redis.call('HDEL', KEYS[1], 'input', 'input_key')
      redis.call('HSET', KEYS[1], 'status', 'working', 'updated', ARGV[2], 'answer', ARGV[i + 1], 'answer_key', f[3])
      redis.call('PUBLISH', ARGV[3], ARGV[4])
      break
    end
  end
end
return 1
