-- state.list: KEYS[1] the owner's meta; ARGV: prefix. The keys that start with
-- the prefix and have a live value (by Redis's clock), in no order.
local fields = redis.call('HGETALL', KEYS[1])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local prefix = ARGV[1]
local keys = {}
for i = 1, #fields, 2 do
  local e = tonumber(string.match(fields[i + 1], '^(%d+) '))
  if string.sub(fields[i], 1, #prefix) == prefix and (e == 0 or e > now) then
    keys[#keys + 1] = fields[i]
  end
end
return keys
