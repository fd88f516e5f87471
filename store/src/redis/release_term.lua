-- release_term(name, ownerId, leaseGeneration, term): clears the holder, keeps the term.
local k = P .. 't:' .. ARGV[2]
local rec = redis.call('HMGET', k, 'hid', 'hg', 'term')
if rec[1] and rec[1] == ARGV[3] and rec[2] == ARGV[4] and rec[3] == ARGV[5] then
  redis.call('HDEL', k, 'hid', 'hg')
  return {'ok', 1}
end
return {'ok', 0}
