-- finish: record the outcome of an attempt this instance began.
-- KEYS: 1 timer hash, 2 this instance's claimed zset, 3 due zset, 4 failed zset
-- ARGV: 1 id, 2 instance id, 3 outcome: delivered | retry | failed,
--       4 last attempt (JSON), 5 next fire_ms (retry), 6 keep ("1": retry
--       stays claimed in this instance's wheel), 7 retention_ms, 8 now_ms
-- Returns 1, or 0 when the timer is no longer this instance's firing timer.
local h = redis.call('HMGET', KEYS[1], 'state', 'owner')
if h[1] ~= 'firing' or h[2] ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'last', ARGV[4])
if ARGV[3] == 'retry' then
  redis.call('HSET', KEYS[1], 'state', 'retrying', 'fire_ms', ARGV[5])
  if ARGV[6] == '1' then
    redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
  else
    redis.call('ZREM', KEYS[2], ARGV[1])
    redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
    redis.call('HSET', KEYS[1], 'owner', '')
  end
  return 1
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'state', ARGV[3], 'owner', '', 'finished_ms', ARGV[8])
if ARGV[3] == 'failed' then
  redis.call('ZADD', KEYS[4], ARGV[8], ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[7])
return 1
