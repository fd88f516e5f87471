-- read_authority(key): the record in any state. The hottest read, so it is standalone (no
-- common.lua prelude to instantiate): ARGV[1] = namespace prefix, ARGV[2] = authority key.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local raw = redis.call('GET', ARGV[1] .. 'a:' .. ARGV[2])
if raw then
  return {'ok', now, raw}
end
return {'ok', now}
