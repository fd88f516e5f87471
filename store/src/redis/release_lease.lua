-- release_lease(ownerId, leaseGeneration): when the generation is current (live or lapsed),
-- delete the lease and everything the owner id published.
local oid, g = ARGV[2], ARGV[3]
if redis.call('HGET', lkey(oid), 'g') == g then
  redis.call('DEL', lkey(oid))
  purge_owner(oid)
  return {'ok', 1}
end
return {'ok', 0}
