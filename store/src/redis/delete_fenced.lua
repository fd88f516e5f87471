-- delete_fenced(key, storeVersion, objectGeneration, authorityOwnerGeneration, ownerId,
-- leaseGeneration): any state but Creating; no lease needed (the owner may be gone).
local r, err = check_fence(ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
if not r then
  return err
end
if r.state == 'creating' then
  return stale('State', ARGV[2])
end
redis.call('DEL', akey(r.key))
charge(r.ownerNode, r.allocation.objectKind, -r.allocation.units)
return {'ok'}
