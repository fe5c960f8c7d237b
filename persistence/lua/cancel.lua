-- cancel: exact cancel. A timer that can still start an attempt (scheduled,
-- retrying) becomes cancelled and leaves every index; one that began an
-- attempt or finished is left as it is.
-- KEYS: 1 timer hash, 2 due zset
-- ARGV: 1 id, 2 claimed key prefix "hw:{P}:claimed:" (same slot), 3 retention_ms, 4 now_ms
-- Returns {1, fields...} cancelled (now or before), {0, fields...} too late, {-1} unknown.
local h = redis.call('HMGET', KEYS[1], 'state', 'owner')
if not h[1] then return {-1} end
local code = 0
if h[1] == 'cancelled' then
  code = 1
elseif h[1] == 'scheduled' or h[1] == 'retrying' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  if h[2] and h[2] ~= '' then redis.call('ZREM', ARGV[2] .. h[2], ARGV[1]) end
  redis.call('HSET', KEYS[1], 'state', 'cancelled', 'owner', '', 'finished_ms', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  code = 1
end
local r = redis.call('HGETALL', KEYS[1])
table.insert(r, 1, code)
return r
