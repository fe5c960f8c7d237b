-- cancel: exact cancel. A timer that can still start an attempt (scheduled,
-- retrying, paused) becomes cancelled and leaves every index; one that began
-- an attempt or finished is left as it is, except a recurring timer in a
-- run: the run completes and no other follows (the flag is read by finish).
-- KEYS: 1 timer key
-- ARGV: 1 id, 2 retention_ms, 3 now_ms
-- Returns {1, record} cancelled (now or before), {2, record} cancelled once
-- its current run ends, {0, record} too late, {-1} unknown.
-- A cancel made by this call (not before) carries a third element, 1.
local r, raw = rec_load(KEYS[1])
if not raw then return {-1} end
if not r then return {0, raw} end
if r[ST] == 'cancelled' then return {1, raw} end
if r[ST] == 'firing' and cjson.decode(r[SPEC])['repeat'] then
  local t = run_get(r)
  t[FLAG], t[RSV], t[NEXT] = 2, 0, 0
  run_set(r, t)
  rec_save(KEYS[1], r)
  return {2, table.concat(r, '\n')}
end
if r[ST] ~= 'scheduled' and r[ST] ~= 'retrying' and r[ST] ~= 'paused' then return {0, raw} end
unplace(KEYS[1], ARGV[1], r)
r[ST], r[OWNER] = 'cancelled', ''
place(KEYS[1], ARGV[1], r, ARGV[3])
ix_trim(KEYS[1], ARGV[1], 'cancelled', ARGV[3], ARGV[2])
rec_save_final(KEYS[1], r, ARGV[2])
return {1, table.concat(r, '\n'), 1} -- 1: cancelled by this call (counted once in metrics)
