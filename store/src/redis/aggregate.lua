-- aggregate(n, then n members of 14 arguments each: op ('t' transfer, 'p' preserve, 'c' check),
-- key, storeVersion, objectGeneration, authorityOwnerGeneration, ownerId, leaseGeneration,
-- targetMesh, targetRid, targetLifecycleGeneration, targetOwnerId, targetLeaseGeneration,
-- hasPayload, payloadHex). Used for transfer_owner, preserve and commit_aggregate: every
-- condition is checked first, then every counter, then every change is applied. A transfer's
-- target must hold a live lease and publish its MeshNode descriptor under it (wire §9 "Target
-- CAS", issue 17 item 5).
local now = now_ms()
local n = tonumber(ARGV[2])
local ops = {}
local svs, ogs = 0, 0
for i = 1, n do
  local b = 3 + (i - 1) * 14
  local op = {
    kind = ARGV[b],
    key = ARGV[b + 1],
    oid = ARGV[b + 5],
    olg = ARGV[b + 6],
    node = {mesh = ARGV[b + 7], rid = ARGV[b + 8], lifecycleGeneration = ARGV[b + 9]},
    owner = {ownerId = ARGV[b + 10], leaseGeneration = ARGV[b + 11]},
    has_payload = ARGV[b + 12] == '1',
    payload = ARGV[b + 13],
  }
  local r, err = check_fence(op.key, ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], op.oid, op.olg)
  if not r then
    return err
  end
  if op.kind == 't' then
    if r.state ~= 'ready' and r.state ~= 'relocating' then
      return stale('State', op.key)
    end
    if not lease_live(op.owner.ownerId, op.owner.leaseGeneration, now) then
      return stale('LeaseNotLive', lease_detail(op.owner.ownerId, op.owner.leaseGeneration))
    end
    -- The target publishes its MeshNode descriptor under that lease and lifecycle.
    local d = redis.call('HGET', dkey('mn', op.node.mesh), op.node.rid)
    local dok = false
    if d then
      local x = cmsgpack.unpack(d)
      dok = x[3] == op.node.lifecycleGeneration and x[1] == op.owner.ownerId
        and x[2] == op.owner.leaseGeneration
    end
    if not dok then
      return stale('Descriptor', op.node.mesh .. '/' .. op.node.rid)
    end
    svs, ogs = svs + 1, ogs + 1
  elseif op.kind == 'p' then
    if r.state == 'creating' then
      return stale('State', op.key)
    end
    if not lease_live(op.oid, op.olg, now) then
      return stale('LeaseNotLive', lease_detail(op.oid, op.olg))
    end
    svs = svs + 1
  end
  op.record = r
  ops[i] = op
end
if svs > 0 and not room('storeVersion', svs) then
  return fail('GenerationExhausted', 'storeVersion')
end
if ogs > 0 and not room('ownerGeneration', ogs) then
  return fail('GenerationExhausted', 'ownerGeneration')
end
local out = {'ok', now}
for i = 1, n do
  local op, r = ops[i], ops[i].record
  if op.kind == 't' then
    r.storeVersion = next_counter('storeVersion')
    r.authorityOwnerGeneration = next_counter('ownerGeneration')
    charge(r.ownerNode, r.allocation.objectKind, -r.allocation.units)
    charge(op.node, r.allocation.objectKind, r.allocation.units)
    r.owner = op.owner
    r.ownerNode = op.node
    r.state = 'ready'
    if op.has_payload then
      r.payload = op.payload
    end
    table.insert(out, put_record(r))
  elseif op.kind == 'p' then
    r.storeVersion = next_counter('storeVersion')
    r.payload = op.payload
    table.insert(out, put_record(r))
  else
    table.insert(out, enc_record(r))
  end
end
return out
