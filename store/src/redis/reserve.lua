-- reserve(key, reservationId, requestJson, objectKind, stableType, mesh, rid,
-- lifecycleGeneration, targetOwnerId, targetLeaseGeneration, capacityDelta, hasContent,
-- contentReference, contentSha256Hex, contentSize, payloadHex, replayRetentionMs).
-- Check order as the memory provider: replay, existing record, target lease, target
-- descriptor, capacity, counters; then write.
local now = now_ms()
local k, resid, req, kind, stype = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local node = {mesh = ARGV[7], rid = ARGV[8], lifecycleGeneration = ARGV[9]}
local owner = {ownerId = ARGV[10], leaseGeneration = ARGV[11]}
local delta = tonumber(ARGV[12])
local retention = tonumber(ARGV[18])
-- (1) replay: `res:<reservationId>` hash {req, e, sv, og, aog, rv}, PX = replay retention
local rk = P .. 'res:' .. resid
local prev = redis.call('HMGET', rk, 'req', 'e', 'sv', 'og', 'aog', 'rv')
if prev[1] and tonumber(prev[2]) > now then
  if prev[1] == req then
    return {'ok', prev[3], prev[4], prev[5], prev[6]}
  end
  return fail('Conflict', 'reservation id ' .. resid .. ' reused with another request')
end
-- (2) an existing record
local raw = redis.call('GET', akey(k))
if raw then
  local r = cjson.decode(raw)
  if r.allocation.objectKind == kind and r.allocation.stableType == stype then
    return {'e', 'AlreadyExists', k, raw, now}
  end
  return fail('SpotIdConflict', k)
end
-- (3) the target lease and its MeshNode descriptor
if not lease_live(owner.ownerId, owner.leaseGeneration, now) then
  return stale('LeaseNotLive', lease_detail(owner.ownerId, owner.leaseGeneration))
end
local d = redis.call('HGET', dkey('mn', node.mesh), node.rid)
local ok = false
if d then
  local x = cmsgpack.unpack(d)
  ok = x[3] == node.lifecycleGeneration and x[1] == owner.ownerId and x[2] == owner.leaseGeneration
end
if not ok then
  return stale('Descriptor', node.mesh .. '/' .. node.rid)
end
-- (4) capacity (limit 0 = unlimited)
local c = redis.call('HMGET', nkey(node.mesh, node.rid, node.lifecycleGeneration), 'la', 'ls', 'ua', 'us')
local limit, used = tonumber(c[2] or '0'), tonumber(c[4] or '0')
if kind == 'actor' then
  limit, used = tonumber(c[1] or '0'), tonumber(c[3] or '0')
end
if limit > 0 and used + delta > limit then
  return fail('CapacityExhausted', node.mesh .. '/' .. node.rid)
end
-- (5) counters, all checked before any write
local names = {'objectGeneration', 'ownerGeneration', 'reservationVersion', 'storeVersion'}
for _, n in ipairs(names) do
  if not room(n, 1) then
    return fail('GenerationExhausted', n)
  end
end
local og = next_counter('objectGeneration')
local aog = next_counter('ownerGeneration')
local rv = next_counter('reservationVersion')
local sv = next_counter('storeVersion')
charge(node, kind, delta)
local content = nil
if ARGV[13] == '1' then
  content = {reference = ARGV[14], sha256 = ARGV[15], size = ARGV[16]}
end
put_record({
  key = k,
  state = 'creating',
  storeVersion = sv,
  objectGeneration = og,
  authorityOwnerGeneration = aog,
  owner = owner,
  ownerNode = node,
  allocation = {state = 'pending', objectKind = kind, stableType = stype, units = delta},
  pendingCreation = {
    reservationId = resid,
    reservationVersion = rv,
    target = {node = node, owner = owner},
    capacityDelta = delta,
    content = content,
  },
  payload = ARGV[17],
})
redis.call('DEL', rk)
redis.call('HSET', rk, 'req', req, 'e', int(now + retention), 'sv', sv, 'og', og, 'aog', aog, 'rv', rv)
redis.call('PEXPIREAT', rk, int(now + retention))
return {'ok', sv, og, aog, rv}
