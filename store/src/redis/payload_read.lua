-- payload_read(reference): a live payload, judged by store time.
local now = now_ms()
local cur = redis.call('HMGET', pkey(ARGV[2]), 'b', 'e')
if cur[1] and tonumber(cur[2]) > now then
  return {'ok', now, cur[1], tonumber(cur[2])}
end
return {'ok', now}
