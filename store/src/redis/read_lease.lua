-- read_lease(ownerId): the live lease, judged by store time.
local now = now_ms()
local v = redis.call('HMGET', lkey(ARGV[2]), 'g', 'e')
if v[1] and tonumber(v[2]) > now then
  return {'ok', now, v[1], tonumber(v[2])}
end
return {'ok', now}
