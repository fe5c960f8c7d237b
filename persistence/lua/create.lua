-- create: store a new timer, or recognise an idempotent repeat.
-- KEYS: 1 timer key
-- ARGV: 1 id, 2 the record as the prelude lays it out (head: scheduled,
--       no attempt, its due time, this instance's tag as owner when it holds
--       the timer in its wheel at once, the labels bit; tail: written here
--       once), 3... its labels ("key:value", for the index)
-- Returns {1} created; {0, record, history} a timer with the same spec and
-- the same due time as given exists; {2, state} another timer holds the id.
local r, v = rec_get(KEYS[1])
if v then
  if rec_same(v, ARGV[2]) then
    return {0, v, redis.call('GET', hist_key(KEYS[1])) or ''}
  end
  return {2, r.st}
end
r = new_head(ARGV[2])
count_add(KEYS[1], ARGV[1], tail_queue(ARGV[2]), r.st, 1)
redis.call('SET', KEYS[1], ARGV[2])
place(KEYS[1], ARGV[1], r, r.fire)
if #ARGV > 2 then labels_index(KEYS[1], ARGV[1], {unpack(ARGV, 3)}, 'ZADD') end
return {1}
