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
-- The owner ID without decoding the whole record (its payload can be large): records are
-- written only by common.lua's enc_record, in a fixed key order where the first
-- ',"owner":{"ownerId":"' is the record's owner (the fields before it are the percent-encoded
-- key, the state and decimal generations, none of which can hold that text). The value is read
-- at that place only; an ID with a JSON escape in it (a quote, a backslash, a slash) is decoded
-- in full instead.
local owner_at = string.find(raw, ',"owner":{"ownerId":"', 1, true)
local owner_id = owner_at and string.match(raw, '^([^"\\]*)"', owner_at + 21)
if not owner_id then
  owner_id = cjson.decode(raw).owner.ownerId
end
local v = redis.call('HMGET', ARGV[1] .. 'l:' .. owner_id, 'g', 'e')
if v[1] and tonumber(v[2]) > now then
  return {'ok', now, raw, v[1], tonumber(v[2])}
end
return {'ok', now, raw}
