-- claim_lease(ownerId, ttlMs, gcGraceMs): always a new lease generation; purges what the owner
-- id published under any earlier generation.
local now = now_ms()
local oid, ttl, grace = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if not room('leaseGeneration', 1) then
  return fail('GenerationExhausted', 'leaseGeneration')
end
local g = next_counter('leaseGeneration')
purge_owner(oid)
local exp = now + ttl
redis.call('DEL', lkey(oid))
redis.call('HSET', lkey(oid), 'g', g, 'e', int(exp))
redis.call('PEXPIREAT', lkey(oid), int(exp + grace))
return {'ok', g, exp, now}
