-- payload_put(reference, bytes, retentionMs): immutable; the same bytes extend the retention
-- to the later expiry; other bytes under a live reference are a Conflict.
local now = now_ms()
local k, bytes = pkey(ARGV[2]), ARGV[3]
local exp = now + tonumber(ARGV[4])
local cur = redis.call('HMGET', k, 'b', 'e')
if cur[1] and tonumber(cur[2]) > now then
  if cur[1] ~= bytes then
    return fail('Conflict', 'relocation payload ' .. ARGV[2] .. ' is immutable')
  end
  local m = math.max(tonumber(cur[2]), exp)
  redis.call('HSET', k, 'e', int(m))
  redis.call('PEXPIREAT', k, int(m))
  return {'ok', m}
end
redis.call('DEL', k)
redis.call('HSET', k, 'b', bytes, 'e', int(exp))
redis.call('PEXPIREAT', k, int(exp))
return {'ok', exp}
