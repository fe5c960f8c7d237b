-- create: store a new timer, or recognise an idempotent repeat.
-- KEYS: 1 timer hash, 2 due zset, 3 this instance's claimed zset
-- ARGV: 1 id, 2 canonical spec, 3 fire_ms, 4 now_ms, 5 claim ("1": the
--       caller holds it in its wheel at once), 6 instance id, 7 the due time
--       as the client gave it ("delay_ms=1500"); spec and when together are
--       what idempotency compares
-- Returns {1} created; {0, field, value, ...} same spec exists (its fields);
-- {2, state} another spec holds the id.
local cur = redis.call('HMGET', KEYS[1], 'spec', 'when')
if cur[1] then
  if cur[1] == ARGV[2] and cur[2] == ARGV[7] then
    local r = redis.call('HGETALL', KEYS[1])
    table.insert(r, 1, 0)
    return r
  end
  return {2, redis.call('HGET', KEYS[1], 'state') or ''}
end
local owner = ''
if ARGV[5] == '1' then
  owner = ARGV[6]
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
else
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
end
redis.call('HSET', KEYS[1], 'spec', ARGV[2], 'state', 'scheduled', 'fire_ms', ARGV[3],
           'attempts', 0, 'created_ms', ARGV[4], 'owner', owner, 'when', ARGV[7])
return {1}
