-- payload_renew(reference, retentionMs): a live payload only.
local now = now_ms()
local k = pkey(ARGV[2])
local e = redis.call('HGET', k, 'e')
if e and tonumber(e) > now then
  local exp = now + tonumber(ARGV[3])
  redis.call('HSET', k, 'e', int(exp))
  redis.call('PEXPIREAT', k, int(exp))
  return {'ok', exp}
end
return fail('Missing', ARGV[2])
