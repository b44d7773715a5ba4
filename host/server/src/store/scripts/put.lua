-- state.put: KEYS[1] the owner's values, KEYS[2] its meta ("expiry size" per
-- key, the expiry in ms since the epoch, 0 for none), KEYS[3] its usage (keys,
-- bytes, earliest expiry); ARGV: key, value, ttl (ms, 0 for none), size, max
-- keys, max bytes. Time is Redis's own, so replicas with skewed clocks agree.
-- The usage is made again from the meta when it is gone (a manual DEL); the
-- owner's expired values are removed first when the earliest expiry passed; a
-- write that grows the usage past a limit is refused. Returns `created`,
-- `replaced`, `keys` or `bytes` (the limit that refused it).
local key, value, ttl, size = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local max_keys, max_bytes = tonumber(ARGV[5]), tonumber(ARGV[6])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local function parse(meta)
  local e, s = string.match(meta, '^(%d+) (%d+)$')
  return tonumber(e), tonumber(s)
end
local keys, bytes, earliest = 0, 0, 0
if redis.call('EXISTS', KEYS[3]) == 1 then
  local usage = redis.call('HMGET', KEYS[3], 'keys', 'bytes', 'earliest')
  keys = math.max(0, tonumber(usage[1] or '0'))
  bytes = math.max(0, tonumber(usage[2] or '0'))
  earliest = tonumber(usage[3] or '0')
else
  local fields = redis.call('HGETALL', KEYS[2])
  for i = 1, #fields, 2 do
    local e, s = parse(fields[i + 1])
    keys = keys + 1
    bytes = bytes + s
    if e ~= 0 and (earliest == 0 or e < earliest) then
      earliest = e
    end
  end
end
if earliest ~= 0 and earliest <= now then
  local fields = redis.call('HGETALL', KEYS[2])
  earliest = 0
  for i = 1, #fields, 2 do
    local e, s = parse(fields[i + 1])
    if e ~= 0 and e <= now then
      redis.call('HDEL', KEYS[2], fields[i])
      redis.call('HDEL', KEYS[1], fields[i])
      keys = math.max(0, keys - 1)
      bytes = math.max(0, bytes - s)
    elseif e ~= 0 and (earliest == 0 or e < earliest) then
      earliest = e
    end
  end
end
local old = redis.call('HGET', KEYS[2], key)
local after_keys, after_bytes = keys + 1, bytes + size
if old then
  local _, s = parse(old)
  after_keys, after_bytes = keys, math.max(0, bytes - s) + size
end
local function store_usage(k, b, e)
  redis.call('HSET', KEYS[3], 'keys', string.format('%.0f', k), 'bytes', string.format('%.0f', b), 'earliest', string.format('%.0f', e))
end
local grows = after_keys > keys or after_bytes > bytes
if grows and after_keys > max_keys then
  store_usage(keys, bytes, earliest)
  return 'keys'
end
if grows and after_bytes > max_bytes then
  store_usage(keys, bytes, earliest)
  return 'bytes'
end
local expiry = 0
if ttl > 0 then
  expiry = now + ttl
end
redis.call('HSET', KEYS[1], key, value)
redis.call('HSET', KEYS[2], key, string.format('%.0f', expiry) .. ' ' .. ARGV[4])
if expiry ~= 0 and (earliest == 0 or expiry < earliest) then
  earliest = expiry
end
store_usage(after_keys, after_bytes, earliest)
if old then
  return 'replaced'
end
return 'created'
