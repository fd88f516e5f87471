-- set_limits(ownerId, leaseGeneration, mesh, rid, lifecycleGeneration, actors, spots).
local now = now_ms()
local oid, olg = ARGV[2], ARGV[3]
if not lease_live(oid, olg, now) then
  return stale('LeaseNotLive', lease_detail(oid, olg))
end
redis.call('HSET', nkey(ARGV[4], ARGV[5], ARGV[6]), 'la', ARGV[7], 'ls', ARGV[8])
return {'ok'}
