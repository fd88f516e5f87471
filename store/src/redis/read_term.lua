-- read_term(name): the live term lease.
local now = now_ms()
local rec = redis.call('HMGET', P .. 't:' .. ARGV[2], 'hid', 'hg', 'term', 'ep', 'e')
if rec[1] and tonumber(rec[5]) > now then
  return {'ok', now, rec[1], rec[2], rec[3], rec[4], tonumber(rec[5])}
end
return {'ok', now}
