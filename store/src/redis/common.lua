-- zlink-store: prelude shared by every script (the Rust provider prepends it to each script).
-- ARGV[1] is always the namespace prefix `zl:{<namespace>}:`; script arguments start at ARGV[2].
-- Every script returns {'ok', ...} or {'e', kind, detail[, extra...]}; a refusal never writes.
-- Generations and counters are decimal strings throughout: a Lua number is a double and would
-- lose precision above 2^53, so no generation ever passes through a Lua number.
local P = ARGV[1]

-- Store time in milliseconds, from the server's clock only.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fail(kind, detail)
  return {'e', kind, detail or ''}
end

local function stale(reason, detail)
  return {'e', 'Stale:' .. reason, detail or ''}
end

local function int(n)
  return string.format('%d', n)
end

-- Decimal strings (canonical, no leading zeros): a <= b.
local function dec_le(a, b)
  if #a ~= #b then
    return #a < #b
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return true
end

-- Decimal string + 1, exact for any length.
local function dec_inc(s)
  local b = {string.byte(s, 1, -1)}
  local i = #b
  while i >= 1 do
    if b[i] == 57 then
      b[i] = 48
      i = i - 1
    else
      b[i] = b[i] + 1
      return string.char(unpack(b))
    end
  end
  return '1' .. string.char(unpack(b))
end

-- ---- store-global counters: `c:<name>`, decimal string, never above i64::MAX ----------------
local function ckey(name)
  return P .. 'c:' .. name
end

local function counter(name)
  return redis.call('GET', ckey(name)) or '0'
end

-- Whether `name` can be incremented `n` more times (n <= 800) without passing i64::MAX.
local function room(name, n)
  return dec_le(counter(name), '9223372036854775' .. string.format('%03d', 807 - n))
end

local function next_counter(name)
  local v = dec_inc(counter(name))
  redis.call('SET', ckey(name), v)
  return v
end

-- ---- owner leases: `l:<ownerId>` hash {g = generation, e = expiry ms} -----------------------
local function lkey(owner_id)
  return P .. 'l:' .. owner_id
end

local function lease_live(owner_id, gen, now)
  local v = redis.call('HMGET', lkey(owner_id), 'g', 'e')
  return v[1] ~= false and v[1] == gen and tonumber(v[2]) > now
end

local function lease_detail(owner_id, gen)
  return 'owner ' .. owner_id .. ' lease ' .. gen
end

-- ---- descriptors, RID claims and the per-owner index ----------------------------------------
local function dkey(tag, scope)
  return P .. 'd:' .. tag .. ':' .. scope
end

local function rkey(mesh)
  return P .. 'r:' .. mesh
end

local function okey(owner_id)
  return P .. 'o:' .. owner_id
end

-- Remove every descriptor and RID claim still published by `owner_id` (any lease generation).
local function purge_owner(owner_id)
  local members = redis.call('SMEMBERS', okey(owner_id))
  for _, m in ipairs(members) do
    local e = cmsgpack.unpack(m)
    local hk, field
    if e[1] == 'd' then
      hk, field = dkey(e[2], e[3]), e[4]
    else
      hk, field = rkey(e[2]), e[3]
    end
    local cur = redis.call('HGET', hk, field)
    if cur and cmsgpack.unpack(cur)[1] == owner_id then
      redis.call('HDEL', hk, field)
    end
  end
  redis.call('DEL', okey(owner_id))
end

-- ---- capacity: `n:<lifecycle>:<#mesh>:<mesh>:<rid>` hash {la, ls, ua, us} -------------------
local function nkey(mesh, rid, lg)
  return P .. 'n:' .. lg .. ':' .. #mesh .. ':' .. mesh .. ':' .. rid
end

local function charge(node, kind, units)
  local k = nkey(node.mesh, node.rid, node.lifecycleGeneration)
  local f = 'us'
  if kind == 'actor' then
    f = 'ua'
  end
  local v = tonumber(redis.call('HGET', k, f) or '0') + units
  if v < 0 then
    v = 0
  end
  redis.call('HSET', k, f, int(v))
end

-- ---- authority: `a:<zla1 key>` canonical JSON, no TTL ---------------------------------------
local function akey(k)
  return P .. 'a:' .. k
end

local function js(s)
  return cjson.encode(s)
end

local function present(v)
  return v ~= nil and v ~= cjson.null
end

local function enc_token(t)
  return '{"ownerId":' .. js(t.ownerId) .. ',"leaseGeneration":' .. js(t.leaseGeneration) .. '}'
end

local function enc_node(n)
  return '{"mesh":' .. js(n.mesh) .. ',"rid":' .. js(n.rid) .. ',"lifecycleGeneration":'
    .. js(n.lifecycleGeneration) .. '}'
end

-- The canonical JSON of a record: fixed key order, generations as decimal strings.
local function enc_record(r)
  local pc = 'null'
  local p = r.pendingCreation
  if present(p) then
    local c = 'null'
    if present(p.content) then
      c = '{"reference":' .. js(p.content.reference) .. ',"sha256":' .. js(p.content.sha256)
        .. ',"size":' .. js(p.content.size) .. '}'
    end
    pc = '{"reservationId":' .. js(p.reservationId) .. ',"reservationVersion":'
      .. js(p.reservationVersion) .. ',"target":{"node":' .. enc_node(p.target.node)
      .. ',"owner":' .. enc_token(p.target.owner) .. '},"capacityDelta":' .. int(p.capacityDelta)
      .. ',"content":' .. c .. '}'
  end
  local a = r.allocation
  return '{"key":' .. js(r.key) .. ',"state":' .. js(r.state) .. ',"storeVersion":'
    .. js(r.storeVersion) .. ',"objectGeneration":' .. js(r.objectGeneration)
    .. ',"authorityOwnerGeneration":' .. js(r.authorityOwnerGeneration) .. ',"owner":'
    .. enc_token(r.owner) .. ',"ownerNode":' .. enc_node(r.ownerNode) .. ',"allocation":{"state":'
    .. js(a.state) .. ',"objectKind":' .. js(a.objectKind) .. ',"stableType":' .. js(a.stableType)
    .. ',"units":' .. int(a.units) .. '},"pendingCreation":' .. pc .. ',"payload":' .. js(r.payload)
    .. '}'
end

local function put_record(r)
  local json = enc_record(r)
  redis.call('SET', akey(r.key), json)
  return json
end

-- The record under the owner fence (key, storeVersion, objectGeneration,
-- authorityOwnerGeneration, ownerId, leaseGeneration), or nil and the refusal. Check order as
-- the memory provider: Missing, StoreVersion, ObjectGeneration, OwnerGeneration, Owner.
local function check_fence(k, sv, og, aog, oid, olg)
  local raw = redis.call('GET', akey(k))
  if not raw then
    return nil, fail('Missing', k)
  end
  local r = cjson.decode(raw)
  if r.storeVersion ~= sv then
    return nil, stale('StoreVersion', k)
  end
  if r.objectGeneration ~= og then
    return nil, stale('ObjectGeneration', k)
  end
  if r.authorityOwnerGeneration ~= aog then
    return nil, stale('OwnerGeneration', k)
  end
  if r.owner.ownerId ~= oid or r.owner.leaseGeneration ~= olg then
    return nil, stale('Owner', k)
  end
  return r
end

-- The Creating record of a reservation (key, reservationId, storeVersion, objectGeneration,
-- authorityOwnerGeneration, reservationVersion), or nil and the refusal.
local function check_reservation(k, rid, sv, og, aog, rv)
  local raw = redis.call('GET', akey(k))
  if not raw then
    return nil, fail('Missing', k)
  end
  local r = cjson.decode(raw)
  local p = r.pendingCreation
  if r.state ~= 'creating' or not present(p) or p.reservationId ~= rid
      or p.reservationVersion ~= rv then
    return nil, stale('Reservation', k)
  end
  if r.storeVersion ~= sv then
    return nil, stale('StoreVersion', k)
  end
  if r.objectGeneration ~= og or r.authorityOwnerGeneration ~= aog then
    return nil, stale('ObjectGeneration', k)
  end
  return r
end

-- ---- Relocation Store payloads: `p:<reference>` hash {b = bytes, e = expiry ms} --------------
local function pkey(reference)
  return P .. 'p:' .. reference
end

-- ---------------------------------------------------------------------------------------------
