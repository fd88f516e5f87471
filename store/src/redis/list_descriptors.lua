-- list_descriptors(kindTag, scope): every descriptor whose publishing lease is live, as a flat
-- list of (rid, ownerId, leaseGeneration, lifecycleGeneration, revision, content, updatedAt).
local now = now_ms()
local all = redis.call('HGETALL', dkey(ARGV[2], ARGV[3]))
local out = {'ok', now}
for i = 1, #all, 2 do
  local x = cmsgpack.unpack(all[i + 1])
  if lease_live(x[1], x[2], now) then
    table.insert(out, all[i])
    table.insert(out, x[1])
    table.insert(out, x[2])
    table.insert(out, x[3])
    table.insert(out, x[4])
    table.insert(out, x[5])
    table.insert(out, x[6])
  end
end
return out
