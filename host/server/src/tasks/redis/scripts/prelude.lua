local function ended(key, now, stale)
  local f = redis.call('HMGET', key, 'status', 'created', 'extended')
  if not f[1] then return 'gone' end
  if f[1] ~= 'working' and f[1] ~= 'input_required' then return 'ended' end
  if (tonumber(f[2]) or 0) + (tonumber(f[3]) or 0) + stale < now then return 'ended' end
  return 'working'
end
local function forget(order, sizes, bytes, prefix, id)
  redis.call('DEL', prefix .. id)
  redis.call('ZREM', order, id)
  local size = redis.call('HGET', sizes, id)
  if size then
    redis.call('HDEL', sizes, id)
    redis.call('DECRBY', bytes, size)
  end
end
local function make_room(order, sizes, bytes, prefix, now, stale, fits, keep)
  local start = 0
  while not fits() do
    local ids = redis.call('ZRANGE', order, start, start + 99)
    if #ids == 0 then return false end
    local kept = 0
    for _, id in ipairs(ids) do
      if fits() then return true end
      if id ~= keep and ended(prefix .. id, now, stale) ~= 'working' then
        forget(order, sizes, bytes, prefix, id)
      else
        kept = kept + 1
      end
    end
    start = start + kept
  end
  return true
end
