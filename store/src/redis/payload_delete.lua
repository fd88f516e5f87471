-- payload_delete(reference): true when a live payload was deleted.
local now = now_ms()
local k = pkey(ARGV[2])
local e = redis.call('HGET', k, 'e')
redis.call('DEL', k)
if e and tonumber(e) > now then
  return {'ok', 1}
end
return {'ok', 0}
