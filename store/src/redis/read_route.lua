-- read_route(key): the authority record in any state plus the live lease of its owner ID, in one
-- round trip (routing §2.1-§2.2: a route-cache miss costs exactly one store read). Standalone,
-- like read_authority: ARGV[1] = namespace prefix, ARGV[2] = authority key.
-- Reply: {'ok', now} (no record) | {'ok', now, raw} (record, no live lease for its owner ID)
--      | {'ok', now, raw, leaseGeneration, leaseExpiresAt}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local raw = redis.call('GET', ARGV[1] .. 'a:' .. ARGV[2])
if not raw then
  return {'ok', now}
end
local owner = cjson.decode(raw).owner
local v = redis.call('HMGET', ARGV[1] .. 'l:' .. owner.ownerId, 'g', 'e')
if v[1] and tonumber(v[2]) > now then
  return {'ok', now, raw, v[1], tonumber(v[2])}
end
return {'ok', now, raw}
