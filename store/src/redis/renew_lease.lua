-- renew_lease(ownerId, leaseGeneration, ttlMs, gcGraceMs): only the current live lease.
local now = now_ms()
local oid, g, ttl, grace = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
if not lease_live(oid, g, now) then
  return stale('LeaseNotLive', lease_detail(oid, g))
end
local exp = now + ttl
redis.call('HSET', lkey(oid), 'e', int(exp))
redis.call('PEXPIREAT', lkey(oid), int(exp + grace))
return {'ok', exp, now}
