-- publish_descriptor(ownerId, leaseGeneration, kindTag, scope, rid, lifecycleGeneration,
-- revision, content): `d:<tag>:<scope>` hash rid -> msgpack {ownerId, leaseGeneration,
-- lifecycleGeneration, revision, content, updatedAt}.
local now = now_ms()
local oid, olg, tag, scope, rid = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local lg, rev, content = ARGV[7], ARGV[8], ARGV[9]
if not lease_live(oid, olg, now) then
  return stale('LeaseNotLive', lease_detail(oid, olg))
end
local hk = dkey(tag, scope)
local cur = redis.call('HGET', hk, rid)
if cur then
  local x = cmsgpack.unpack(cur)
  if x[3] == lg and lease_live(x[1], x[2], now) then
    if not dec_le(x[4], rev) then
      return fail('Conflict', 'descriptor revision ' .. rev .. ' < ' .. x[4])
    end
    if x[4] == rev then
      if x[5] == content and x[1] == oid and x[2] == olg then
        return {'ok', 'unchanged'}
      end
      return fail('Conflict', 'descriptor revision ' .. rev .. ' reused with other content')
    end
  end
end
redis.call('HSET', hk, rid, cmsgpack.pack({oid, olg, lg, rev, content, now}))
redis.call('SADD', okey(oid), cmsgpack.pack({'d', tag, scope, rid}))
return {'ok', 'published'}
