-- claim: move timers due within the window from due to this instance's claims.
-- KEYS: 1 due zset, 2 this instance's claimed zset, 3 this instance's last
--       claimed batch in this partition (a list of ids)
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
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  local tk = ARGV[4] .. id
  local r = rec_load(tk)
  redis.call('ZREM', KEYS[1], id)
  if r and (r[ST] == 'scheduled' or r[ST] == 'retrying') then
    redis.call('ZADD', KEYS[2], r[FIRE], id)
    r[OWNER] = ARGV[3]
    rec_save(tk, r)
    take(id, r)
  end
end
redis.call('DEL', KEYS[3])
for i = 1, #batch, 1000 do
  redis.call('RPUSH', KEYS[3], unpack(batch, i, math.min(i + 999, #batch)))
end
return out
