-- claim_rid(ownerId, leaseGeneration, mesh, rid): `r:<mesh>` hash rid -> msgpack {ownerId,
-- leaseGeneration}.
local now = now_ms()
local oid, olg, mesh, rid = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if not lease_live(oid, olg, now) then
  return stale('LeaseNotLive', lease_detail(oid, olg))
end
local cur = redis.call('HGET', rkey(mesh), rid)
if cur then
  local x = cmsgpack.unpack(cur)
  if not (x[1] == oid and x[2] == olg) and lease_live(x[1], x[2], now) then
    return fail('RoutingIdConflict', mesh .. '/' .. rid .. ' held by ' .. x[1])
  end
end
redis.call('HSET', rkey(mesh), rid, cmsgpack.pack({oid, olg}))
redis.call('SADD', okey(oid), cmsgpack.pack({'r', mesh, rid}))
return {'ok'}
