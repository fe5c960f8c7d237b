-- begin: the step before attempts start, for the timers of one partition
-- that fell due together (one call for the batch). Only a timer still
-- claimed by this instance, still waiting and not moved since it was
-- claimed (same version: a fire, reschedule or pause since then made that
-- run void) may start; it becomes 'firing', so a cancel from now on answers
-- 409 (this is what makes cancel exact) and a fire is kept for after the run.
-- KEYS: the timer keys
-- ARGV: 1 this instance's owner tag, 2 the call's time budget (us, see
--       budget_start), then for the i-th timer (from 3 + 4(i-1)):
--       the version its run was claimed under, the job's token (unique per
--       job of the instance), recurring ("1"; a one-shot timer has one
--       run, so a fire, reschedule or pause between its retries starts its
--       attempts again as run 1, not a second run), and the due time (ms)
--       the job holds for this attempt
-- Returns three numbers per timer it took (all of them, unless its budget
-- ran out: then the first ones, and the caller sends the rest again): its
-- attempt number (>= 1) when it may start, else 0 gone, -1 not waiting
-- (paused, cancelled, finished), -2 not claimed by this instance, -3 moved
-- (a newer version), -4 not due yet; then its run number (1 for the first
-- run; a manual retry of a dead letter replays the run it failed in) and
-- when that run was due (ms; a retry's deadline counts from it), both 0
-- when it may not start, except that -4 gives the timer's due time as the
-- third number. -4 is a timer due later than the job asking holds: a create
-- whose write a failover lost, made again under the same id and version,
-- due later; the job held since the lost create must not start the new one
-- early (it waits for the due time given). Repeating it is safe: a timer
-- this instance already marked firing for the same job (token) answers its
-- attempt again, so a begin whose reply was lost is sent again and the
-- attempt still happens; another job of the same timer (held twice after a
-- lost create reply) is refused.
local out = {}
local me = ARGV[1]
local n = batch_keys(KEYS)
budget_start(ARGV[2], n)
for i = 1, n do
  if budget_spent(i) then break end
  local tk = KEYS[i]
  local a = 3 + 4 * (i - 1)
  -- (the head's fields as locals: a batch's timers make no table each)
  local st, att, fire, owner, ver, runs, rf, plan, nxt, tok = head_fields(tk)
  local job = tonumber(ARGV[a + 1])
  if not st then
    out[#out + 1], out[#out + 2], out[#out + 3] = 0, 0, 0
  elseif st == 'firing' and owner == me and tok == job then
    out[#out + 1], out[#out + 2], out[#out + 3] = att, runs, plan
  elseif not is_waiting(st) then
    out[#out + 1], out[#out + 2], out[#out + 3] = -1, 0, 0
  elseif owner ~= me then
    out[#out + 1], out[#out + 2], out[#out + 3] = -2, 0, 0
  elseif ver ~= tonumber(ARGV[a]) then
    out[#out + 1], out[#out + 2], out[#out + 3] = -3, 0, 0
  elseif fire > tonumber(ARGV[a + 3]) then
    out[#out + 1], out[#out + 2], out[#out + 3] = -4, 0, fire
  else
    att = att + 1
    if att == 1 then -- a new run: its number, and when it was due
      runs = ARGV[a + 2] == '1' and runs + 1 or 1
      plan = fire
    end
    -- firing, for this job; it stays in this instance's claimed zset, where it was
    redis.call('SETRANGE', tk, ZERO, head_pack('firing', att, fire, owner, ver, runs, rf, plan, nxt, job))
    out[#out + 1], out[#out + 2], out[#out + 3] = att, runs, plan
  end
end
return out
