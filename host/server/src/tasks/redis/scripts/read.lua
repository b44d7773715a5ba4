local function bound(name)
  if name == 'payload' then return tonumber(ARGV[2]) end
  if name == 'input' or name == 'answer' then return tonumber(ARGV[3]) end
  return tonumber(ARGV[1])
end
local fields = {}
for i = 4, #ARGV do
  if redis.call('HSTRLEN', KEYS[1], ARGV[i]) > bound(ARGV[i]) then
    return {'oversized', ARGV[i]}
  end
  fields[#fields + 1] = ARGV[i]
end
local values = redis.call('HMGET', KEYS[1], unpack(fields))
local out = {'ok'}
for i = 1, #fields do out[i + 1] = values[i] end
return out
