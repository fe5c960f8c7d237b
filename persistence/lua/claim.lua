-- claim: move timers due within the window from due to this instance's claims.
-- KEYS: 1 due zset, 2 this instance's claimed zset
-- ARGV: 1 horizon_ms (claim fire_ms <= horizon), 2 limit, 3 instance id,
--       4 timer key prefix "hw:{P}:t:" (same hash tag, so the same slot)
-- Returns {id, spec, fire_ms, attempts, ...} for each claimed timer.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, id in ipairs(ids) do
  local tk = ARGV[4] .. id
  local h = redis.call('HMGET', tk, 'spec', 'fire_ms', 'attempts', 'state')
  redis.call('ZREM', KEYS[1], id)
  if h[1] and (h[4] == 'scheduled' or h[4] == 'retrying') then
    redis.call('ZADD', KEYS[2], h[2], id)
    redis.call('HSET', tk, 'owner', ARGV[3])
    out[#out + 1] = id
    out[#out + 1] = h[1]
    out[#out + 1] = h[2]
    out[#out + 1] = h[3]
  end
end
return out
