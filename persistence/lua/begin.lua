-- begin: the step before an attempt starts. Only a timer still claimed by
-- this instance and still waiting may start; it becomes 'firing', so a
-- cancel from now on answers 409 (this is what makes cancel exact).
-- KEYS: 1 timer key, 2 this instance's claimed zset
-- ARGV: 1 id, 2 instance id, 3 now_ms
-- Returns {1, attempt number} or {0, reason}. Repeating it is safe: a timer
-- this instance already marked firing answers {1, its attempt} again, so a
-- begin whose reply was lost (Redis slower than the client's timeout) is
-- sent again and the attempt still happens.
local r = rec_load(KEYS[1])
if not r then return {0, 'gone'} end
if r[ST] == 'firing' and r[OWNER] == ARGV[2] then return {1, tonumber(r[ATT])} end
if r[ST] ~= 'scheduled' and r[ST] ~= 'retrying' then return {0, r[ST]} end
if r[OWNER] ~= ARGV[2] or not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return {0, 'not claimed'}
end
local n = tonumber(r[ATT]) + 1
r[ATT] = tostring(n)
r[ST] = 'firing'
rec_save(KEYS[1], r)
return {1, n}
