-- capacity_use(mesh, rid, lifecycleGeneration): charged actor and spot units.
local v = redis.call('HMGET', nkey(ARGV[2], ARGV[3], ARGV[4]), 'ua', 'us')
return {'ok', v[1] or '0', v[2] or '0'}
