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
--               of attempts under the same id, its history kept, no longer
--               expiring
-- Each bumps the version, so a run some instance holds under an older
-- version never starts (begin checks it). A one-shot timer in its attempt
-- cannot take fire, reschedule or pause (it runs once); finished timers
-- take nothing.
-- KEYS: 1 timer key
-- ARGV: 1 id, 2 op, 3 now_ms, 4 fire_ms (reschedule, skip), 5 horizon_ms
--       (what is due by then is claimed by this instance at once; -1: never),
--       6 this instance's owner tag, 7 and 8 (skip only) the version held and
--       the slots skipped
-- Returns {code, record, history, held}: code 1 done (held 1: this instance
-- now holds the run in its claims), 0 not possible in this state; or {-1}
-- unknown.
local r, v = rec_get(KEYS[1])
if not r then return {-1} end
local op, now, st = ARGV[2], tonumber(ARGV[3]), r.st
local function answer(code, held)
  return {code, redis.call('GET', KEYS[1]), redis.call('GET', hist_key(KEYS[1])) or '', held or 0}
end
local function done(held)
  head_put(KEYS[1], r)
  return answer(1, held)
end
local function count_to(to) count_step(KEYS[1], ARGV[1], tail_decode(v).queue, r, r.st, to) end
local function wait_at(fire)
  revoke(KEYS[1], ARGV[1], r)
  unplace(KEYS[1], ARGV[1], r)
  count_to('scheduled')
  r.ver = r.ver + 1
  run_clear(r)
  r.att, r.fire, r.st = 0, fire, 'scheduled'
  return done(hold_or_index(KEYS[1], ARGV[1], r, ARGV[5], ARGV[6]))
end

-- skip: the holder of a calendar schedule's waiting run whose slot was
-- missed (its misfire policy is skip) moves it to its next slot ARGV[4]
-- and counts ARGV[8] skipped slots; only under the version it holds
-- (ARGV[7]), so an instruction that came meanwhile wins.
if op == 'skip' then
  if not is_waiting(r.st) or r.owner ~= ARGV[6] or r.ver ~= tonumber(ARGV[7]) or r.att ~= 0 then
    return answer(0)
  end
  redis.call('HINCRBY', skipped_key(KEYS[1]), ARGV[1], tonumber(ARGV[8]))
  r.sk = 1
  unplace(KEYS[1], ARGV[1], r) -- (no revoke: the holder asked)
  r.ver = r.ver + 1
  run_clear(r)
  r.fire = tonumber(ARGV[4])
  return done(hold_or_index(KEYS[1], ARGV[1], r, ARGV[5], ARGV[6]))
end

if op == 'retry' then
  if st ~= 'failed' then return answer(0) end
  redis.call('ZREM', key_base(KEYS[1]) .. 'failed', ARGV[1])
  keep_forever(KEYS[1])
  replay_run(r)
  return wait_at(now)
end
if is_final(st) then return answer(0) end
local every = tail_decode(v).every
if st == 'firing' then
  if every == 0 then return answer(0) end
  r.ver = r.ver + 1
  if op == 'fire' then
    r.rsv, r.flag, r.next = 1, 0, 0
  elseif op == 'reschedule' then
    r.rsv, r.flag, r.next = 0, 0, tonumber(ARGV[4])
  elseif op == 'pause' then
    r.flag = 1
  elseif r.flag == 1 then -- resume, after a pause during this run
    r.flag = 0
  end
  return done(0)
end
-- waiting (scheduled, retrying) or paused
if op == 'fire' then return wait_at(now) end
if op == 'reschedule' then return wait_at(tonumber(ARGV[4])) end
if op == 'pause' then
  if st == 'paused' then return answer(1) end
  revoke(KEYS[1], ARGV[1], r)
  unplace(KEYS[1], ARGV[1], r)
  r.ver = r.ver + 1
  r.rsv, r.next = 0, 0
  count_to('paused')
  r.st, r.owner, r.att = 'paused', NO_OWNER, 0
  place(KEYS[1], ARGV[1], r, now)
  return done(0)
end
if st ~= 'paused' then return answer(1) end -- resume of a timer that is not paused
if every > 0 then return wait_at(now + every) end
-- a calendar schedule (every < 0) resumes at the slot it was paused at, even
-- past: the engine applies its misfire policy to a slot that was missed
if every < 0 then return wait_at(r.fire) end
return wait_at(math.max(r.fire, now))
