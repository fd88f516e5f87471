-- remove_descriptor(ownerId, leaseGeneration, kindTag, scope, rid): only the publisher's token.
local oid, olg, tag, scope, rid = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local hk = dkey(tag, scope)
local cur = redis.call('HGET', hk, rid)
if cur then
  local x = cmsgpack.unpack(cur)
  if x[1] == oid and x[2] == olg then
    redis.call('HDEL', hk, rid)
    redis.call('SREM', okey(oid), cmsgpack.pack({'d', tag, scope, rid}))
    return {'ok', 1}
  end
end
return {'ok', 0}
