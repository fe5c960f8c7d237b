-- begin: the step before an attempt starts. Only a timer still claimed by
-- this instance, still waiting and not moved since it was claimed (same
-- version: a fire, reschedule or pause since then made that run void) may
-- start; it becomes 'firing', so a cancel from now on answers 409 (this is
-- what makes cancel exact) and a fire is kept for after the run.
-- KEYS: 1 timer key
-- ARGV: 1 instance id, 2 version the run was claimed under, 3 recurring
--       ("1": remember when this run was due, for fixed_rate), 4 the job's
--       token (unique per job of the instance)
-- Returns {1, attempt number} or {0, reason}. Repeating it is safe: a timer
-- this instance already marked firing for the same job (token) answers
-- {1, its attempt} again, so a begin whose reply was lost (Redis slower than
-- the client's timeout) is sent again and the attempt still happens; another
-- job of the same timer (held twice after a lost create reply) is refused.
local r = rec_load(KEYS[1])
if not r then return {0, 'gone'} end
if r[ST] == 'firing' and r[OWNER] == ARGV[1] and run_get(r)[TOK] == tonumber(ARGV[4]) then
  return {1, tonumber(r[ATT])}
end
if r[ST] ~= 'scheduled' and r[ST] ~= 'retrying' then return {0, r[ST]} end
-- The owner line names the instance whose claimed zset holds the timer:
-- every script that adds to or removes from a claimed zset sets it with it.
if r[OWNER] ~= ARGV[1] then return {0, 'not claimed'} end
local t = run_get(r)
if t[V] ~= tonumber(ARGV[2]) then return {0, 'moved'} end
local n = tonumber(r[ATT]) + 1
if n == 1 then
  t[RUNS] = t[RUNS] + 1
  if ARGV[3] == '1' then t[PLAN] = tonumber(r[FIRE]) end
end
t[TOK] = tonumber(ARGV[4])
run_set(r, t)
r[ATT] = tostring(n)
r[ST] = 'firing' -- stays in this instance's claimed zset, where it was
rec_save(KEYS[1], r)
return {1, n}
