-- commit_ready(key, reservationId, storeVersion, objectGeneration, authorityOwnerGeneration,
-- reservationVersion, targetOwnerId, targetLeaseGeneration, payloadHex).
local now = now_ms()
local r, err = check_reservation(ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
if not r then
  return err
end
if not lease_live(ARGV[8], ARGV[9], now) then
  return stale('LeaseNotLive', lease_detail(ARGV[8], ARGV[9]))
end
if not room('storeVersion', 1) then
  return fail('GenerationExhausted', 'storeVersion')
end
r.state = 'ready'
r.storeVersion = next_counter('storeVersion')
r.allocation.state = 'active'
r.pendingCreation = nil
r.payload = ARGV[10]
return {'ok', now, put_record(r)}
