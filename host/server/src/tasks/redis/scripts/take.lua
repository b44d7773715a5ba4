if redis.call('HSTRLEN', KEYS[1], 'answer') > tonumber(ARGV[2]) then return false end
local f = redis.call('HMGET', KEYS[1], 'answer_key', 'answer')
if f[1] ~= ARGV[1] or not f[2] then return false end
redis.call('HDEL', KEYS[1], 'answer', 'answer_key')
return f[2]
