-- state.list: KEYS[1] the owner's meta; ARGV: prefix, now (ms). The keys that
-- start with the prefix and have a live value, in no order.
local fields = redis.call('HGETALL', KEYS[1])
local now, prefix = tonumber(ARGV[2]), ARGV[1]
local keys = {}
for i = 1, #fields, 2 do
  local e = tonumber(string.match(fields[i + 1], '^(%d+) '))
  if string.sub(fields[i], 1, #prefix) == prefix and (e == 0 or e > now) then
    keys[#keys + 1] = fields[i]
  end
end
return keys
