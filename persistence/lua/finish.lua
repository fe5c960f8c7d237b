-- finish: record the outcome of an attempt this instance began.
-- KEYS: 1 timer key, 2 this instance's claimed zset, 3 due zset, 4 failed zset
-- ARGV: 1 id, 2 instance id, 3 outcome: delivered | retry | failed,
--       4 last attempt (JSON), 5 next fire_ms (retry), 6 keep ("1": retry
--       stays claimed in this instance's wheel), 7 retention_ms, 8 now_ms
-- Returns 1, or 0 when the timer is no longer this instance's firing timer.
-- Repeating it is safe: when the record already shows this outcome (a finish
-- whose reply was lost, sent again) it answers 1 and changes nothing.
local r = rec_load(KEYS[1])
if not r then return 0 end
if r[ST] ~= 'firing' or r[OWNER] ~= ARGV[2] then
  if r[LAST] == ARGV[4] and (r[ST] == ARGV[3] or (ARGV[3] == 'retry' and r[ST] == 'retrying')) then
    return 1
  end
  return 0
end
r[LAST] = ARGV[4]
if ARGV[3] == 'retry' then
  r[ST] = 'retrying'
  r[FIRE] = ARGV[5]
  if ARGV[6] == '1' then
    redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
  else
    redis.call('ZREM', KEYS[2], ARGV[1])
    redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
    r[OWNER] = ''
  end
  rec_save(KEYS[1], r)
  return 1
end
redis.call('ZREM', KEYS[2], ARGV[1])
r[ST] = ARGV[3]
r[OWNER] = ''
if ARGV[3] == 'failed' then
  redis.call('ZADD', KEYS[4], ARGV[8], ARGV[1])
end
rec_save(KEYS[1], r)
redis.call('PEXPIRE', KEYS[1], ARGV[7])
return 1
