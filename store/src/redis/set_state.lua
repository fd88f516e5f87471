-- set_state(key, storeVersion, objectGeneration, authorityOwnerGeneration, ownerId,
-- leaseGeneration, from, to): the transition itself is validated by the caller.
local now = now_ms()
local r, err = check_fence(ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
if not r then
  return err
end
if r.state ~= ARGV[8] then
  return stale('State', ARGV[2])
end
if not lease_live(ARGV[6], ARGV[7], now) then
  return stale('LeaseNotLive', lease_detail(ARGV[6], ARGV[7]))
end
if not room('storeVersion', 1) then
  return fail('GenerationExhausted', 'storeVersion')
end
r.state = ARGV[9]
r.storeVersion = next_counter('storeVersion')
return {'ok', now, put_record(r)}
