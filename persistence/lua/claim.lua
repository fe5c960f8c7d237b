-- claim: move timers due within the window from due to this instance's claims.
-- KEYS: 1 due zset, 2 this instance's claimed zset
-- ARGV: 1 horizon_ms (claim fire_ms <= horizon), 2 limit, 3 instance id,
--       4 timer key prefix "hw:{P}:t:" (same hash tag, so the same slot)
-- Returns {id, spec, fire_ms, attempts, ...} for each claimed timer.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, id in ipairs(ids) do
  local tk = ARGV[4] .. id
  local r = rec_load(tk)
  redis.call('ZREM', KEYS[1], id)
  if r and (r[ST] == 'scheduled' or r[ST] == 'retrying') then
    redis.call('ZADD', KEYS[2], r[FIRE], id)
    r[OWNER] = ARGV[3]
    rec_save(tk, r)
    out[#out + 1] = id
    out[#out + 1] = r[SPEC]
    out[#out + 1] = r[FIRE]
    out[#out + 1] = r[ATT]
  end
end
return out
