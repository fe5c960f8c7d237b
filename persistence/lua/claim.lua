-- claim: move timers due within the window from the partition's waiting
-- indexes (every namespace's scheduled and retrying, see the prelude) to
-- this instance's claims, soonest due first.
-- KEYS: 1 the partition's namespace registry (hw:{P}:nss), 2 this instance's
--       claimed zset, 3 this instance's last claimed batch in this partition
--       (a list of ids)
-- ARGV: 1 horizon_ms (claim fire_ms <= horizon), 2 limit, 3 instance id,
--       4 timer key prefix "hw:{P}:t:" (same hash tag, so the same slot),
--       5 replay ("1": the reply to the previous claim was lost; return its
--       timers again, those still waiting and still ours)
-- Returns {id, spec, fire_ms, attempts, version, request id, ...} for each
-- claimed timer (request id: of the request that created it, or '').
local out, batch = {}, {}
local function take(id, r)
  out[#out + 1] = id
  out[#out + 1] = r[SPEC]
  out[#out + 1] = r[FIRE]
  out[#out + 1] = r[ATT]
  out[#out + 1] = run_get(r)[V]
  out[#out + 1] = rec_rid(r)
  batch[#batch + 1] = id
end
if ARGV[5] == '1' then
  for _, id in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
    local r = rec_load(ARGV[4] .. id)
    if r and r[OWNER] == ARGV[3] and (r[ST] == 'scheduled' or r[ST] == 'retrying') then take(id, r) end
  end
end
local limit, base = tonumber(ARGV[2]), key_base(ARGV[4])
-- Earlier releases also kept a waiting timer no instance held in a due zset,
-- hw:{P}:due: its timers move into the waiting indexes, a batch a sweep,
-- and the zset goes once empty.
local old = base .. 'due'
if redis.call('EXISTS', old) == 1 then
  local ids = redis.call('ZRANGE', old, 0, limit - 1)
  for _, id in ipairs(ids) do
    local tk = ARGV[4] .. id
    local r = rec_load(tk)
    if r and (r[ST] == 'scheduled' or r[ST] == 'retrying') and r[OWNER] == '' then place(tk, id, r, r[FIRE]) end
  end
  if #ids > 0 then redis.call('ZREM', old, unpack(ids)) end
end
-- The due entries of every waiting index, soonest first (ties by id, as a
-- zset orders them), at most limit in all.
local due = {}
for _, ns in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local found = 0
  for _, st in ipairs({'scheduled', 'retrying'}) do
    local ik = base .. 'ix:' .. ns .. ':' .. st
    local got = redis.call('ZRANGEBYSCORE', ik, '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, limit)
    for i = 1, #got, 2 do due[#due + 1] = {tonumber(got[i + 1]), got[i], ik} end
    if #got > 0 or redis.call('EXISTS', ik) == 1 then found = 1 end
  end
  if found == 0 then redis.call('SREM', KEYS[1], ns) end -- nothing waits there any more
end
table.sort(due, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end)
local claimed = 0
for i = 1, math.min(#due, limit) do
  local id, tk = due[i][2], ARGV[4] .. due[i][2]
  local r = rec_load(tk)
  redis.call('ZREM', due[i][3], id) -- (an entry of a timer gone or not waiting there is stale)
  if r and (r[ST] == 'scheduled' or r[ST] == 'retrying') and r[OWNER] == '' then
    redis.call('ZADD', KEYS[2], r[FIRE], id) -- place(), with the holder registered once below
    r[OWNER] = ARGV[3]
    rec_save(tk, r)
    take(id, r)
    claimed = claimed + 1
  end
end
if claimed > 0 then redis.call('SADD', base .. 'holders', ARGV[3]) end
redis.call('DEL', KEYS[3])
for i = 1, #batch, 1000 do
  redis.call('RPUSH', KEYS[3], unpack(batch, i, math.min(i + 999, #batch)))
end
return out
