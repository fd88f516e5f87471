-- acquire_term(name, ownerId, leaseGeneration, configEpoch, ttlMs): `t:<name>` hash
-- {hid, hg, term, ep, e}; never expires (the term counter must survive).
local now = now_ms()
local name, oid, olg, epoch, ttl = ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
if not lease_live(oid, olg, now) then
  return stale('LeaseNotLive', lease_detail(oid, olg))
end
local k = P .. 't:' .. name
local rec = redis.call('HMGET', k, 'hid', 'hg', 'term', 'e')
local term
if rec[1] and tonumber(rec[4]) > now then
  if rec[1] ~= oid or rec[2] ~= olg then
    return stale('LeaseNotLive', 'term lease ' .. name .. ' held by ' .. rec[1])
  end
  term = rec[3]
elseif rec[3] then
  if not dec_le(rec[3], '9223372036854775806') then
    return fail('GenerationExhausted', 'term:' .. name)
  end
  term = dec_inc(rec[3])
else
  term = '1'
end
local exp = now + ttl
redis.call('HSET', k, 'hid', oid, 'hg', olg, 'term', term, 'ep', epoch, 'e', int(exp))
return {'ok', term, exp, now}
