-- cancel: exact cancel. A timer that can still start an attempt (scheduled,
-- retrying, paused) becomes cancelled and leaves every index; one that began
-- an attempt or finished is left as it is, except a recurring timer in a
-- run: the run completes and no other follows (the flag is read by finish).
-- KEYS: 1 timer key
-- ARGV: 1 id, 2 retention_ms, 3 now_ms
-- Returns {code, record, history}: code 1 cancelled (now or before), 2
-- cancelled once its current run ends, 0 too late; or {-1} unknown. A
-- cancel made by this call (not before) carries a fourth element, 1.
local r, v = rec_get(KEYS[1])
if not r then return {-1} end
local function answer(code, now)
  return {code, redis.call('GET', KEYS[1]), redis.call('GET', hist_key(KEYS[1])) or '', now}
end
if r.st == 'cancelled' then return answer(1) end
if r.st == 'firing' and tail_decode(v).every ~= 0 then -- recurring (every < 0: a calendar schedule)
  r.flag = 2
  r.rsv, r.next = 0, 0
  head_put(KEYS[1], r)
  return answer(2)
end
if not is_waiting(r.st) and r.st ~= 'paused' then return answer(0) end
revoke(KEYS[1], ARGV[1], r)
count_step(KEYS[1], ARGV[1], tail_decode(v).queue, r, r.st, 'cancelled')
to_final(KEYS[1], ARGV[1], r, 'cancelled', ARGV[3], ARGV[2])
return answer(1, 1) -- 1: cancelled by this call (counted once in metrics)
