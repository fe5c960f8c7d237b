-- control: fire, reschedule, pause or resume a timer (the Circulation
-- Trigger rules; DESIGN §5). Every one of them is an instruction that
-- replaces the ones before it:
--   fire        the next run is now; during a run, it is reserved and starts
--               right after that run (never alongside it)
--   reschedule  the next run is at fire_ms; during a run, after that run
--   pause       the waiting run is dropped; during a run, no run follows it
--   resume      a paused timer waits again: a recurring one every_ms from
--               now, a one-shot at its due time (now if that passed)
--   retry       a failed timer (a dead letter) runs again now: a new series
--               of attempts under the same id, its last attempt kept until
--               the next one, no longer expiring
-- Each bumps the version, so a run some instance holds under an older
-- version never starts (begin checks it). A one-shot timer in its attempt
-- cannot take fire, reschedule or pause (it runs once); finished timers
-- take nothing.
-- KEYS: 1 timer key
-- ARGV: 1 id, 2 op, 3 now_ms, 4 fire_ms (reschedule), 5 horizon_ms (what is
--       due by then is claimed by this instance at once; -1: never),
--       6 instance id
-- Returns {1, record, held} done (held 1: this instance now holds the run in
-- its claims), {0, record} not possible in this state, {-1} unknown.
local r, raw = rec_load(KEYS[1])
if not raw then return {-1} end
if not r then return {0, raw} end
local op, now, st = ARGV[2], tonumber(ARGV[3]), r[ST]
local t = run_get(r)
local function done(held)
  run_set(r, t)
  rec_save(KEYS[1], r)
  return {1, table.concat(r, '\n'), held}
end
local function wait_at(fire)
  unplace(KEYS[1], ARGV[1], r)
  t[V] = t[V] + 1
  t[RSV], t[FLAG], t[NEXT] = 0, 0, 0
  r[ATT] = '0'
  r[FIRE] = string.format('%d', fire)
  r[ST] = 'scheduled'
  return done(rec_place(KEYS[1], ARGV[1], r, ARGV[5], ARGV[6]))
end

if op == 'retry' then
  if st ~= 'failed' then return {0, raw} end
  redis.call('ZREM', key_base(KEYS[1]) .. 'failed', ARGV[1])
  redis.call('PERSIST', KEYS[1])
  return wait_at(now)
end
if st == 'delivered' or st == 'failed' or st == 'cancelled' then return {0, raw} end
local rep = cjson.decode(r[SPEC])['repeat']
if st == 'firing' then
  if not rep then return {0, raw} end
  t[V] = t[V] + 1
  if op == 'fire' then
    t[RSV], t[FLAG], t[NEXT] = 1, 0, 0
  elseif op == 'reschedule' then
    t[RSV], t[FLAG], t[NEXT] = 0, 0, tonumber(ARGV[4])
  elseif op == 'pause' then
    t[FLAG] = 1
  elseif t[FLAG] == 1 then -- resume, after a pause during this run
    t[FLAG] = 0
  end
  return done(0)
end
-- waiting (scheduled, retrying) or paused
if op == 'fire' then return wait_at(now) end
if op == 'reschedule' then return wait_at(tonumber(ARGV[4])) end
if op == 'pause' then
  if st == 'paused' then return {1, raw, 0} end
  unplace(KEYS[1], ARGV[1], r)
  t[V] = t[V] + 1
  t[RSV], t[NEXT] = 0, 0
  r[ST], r[OWNER] = 'paused', ''
  place(KEYS[1], ARGV[1], r, ARGV[3])
  r[ATT] = '0'
  return done(0)
end
if st ~= 'paused' then return {1, raw, 0} end -- resume of a timer that is not paused
if rep then return wait_at(now + rep['every_ms']) end
return wait_at(math.max(tonumber(r[FIRE]), now))
