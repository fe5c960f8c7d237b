-- begin: the step before an attempt starts. Only a timer still claimed by
-- this instance and still waiting may start; it becomes 'firing', so a
-- cancel from now on answers 409 (this is what makes cancel exact).
-- KEYS: 1 timer hash, 2 this instance's claimed zset
-- ARGV: 1 id, 2 instance id, 3 now_ms
-- Returns {1, attempt number} or {0, reason}.
local h = redis.call('HMGET', KEYS[1], 'state', 'owner')
if not h[1] then return {0, 'gone'} end
if h[1] ~= 'scheduled' and h[1] ~= 'retrying' then return {0, h[1]} end
if h[2] ~= ARGV[2] or not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return {0, 'not claimed'}
end
local n = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('HSET', KEYS[1], 'state', 'firing', 'started_ms', ARGV[3])
return {1, n}
