-- abort(key, reservationId, storeVersion, objectGeneration, authorityOwnerGeneration,
-- reservationVersion): delete the Creating record and return its capacity. No lease needed.
local r, err = check_reservation(ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
if not r then
  return err
end
redis.call('DEL', akey(r.key))
charge(r.ownerNode, r.allocation.objectKind, -r.allocation.units)
return {'ok'}
