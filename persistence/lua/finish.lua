-- finish: record the outcome of an attempt this instance began, and for a
-- recurring timer schedule its next run (the Circulation Trigger rules: a
-- fire or reschedule that arrived during the run decides the next run; a
-- pause or cancel that arrived during it stops it here).
-- KEYS: 1 timer key, 2 failed zset
-- ARGV: 1 id, 2 instance id, 3 outcome: delivered | retry | failed | next
--       (a recurring run succeeded) | stop (a recurring run answered 410),
--       4 last attempt (JSON), 5 next fire_ms (retry), 6 keep ("1": what is
--       due by the horizon stays claimed in this instance's wheel),
--       7 retention_ms, 8 now_ms, 9 horizon_ms, 10 repeat.every_ms,
--       11 "rate" (fixed_rate) or "delay" (fixed_delay), 12 repeat.times
--       (0: no limit), 13 the callback's Hookwheel-Next-Delay-Ms (-1: none),
--       14 attempts kept in the history
-- Returns {1, fire_ms, version, kept, attempts}: kept is 1 when the timer
-- waits in this instance's claims for its next attempt at fire_ms; or {0}
-- when the timer is no longer this instance's firing timer. Repeating it is
-- safe: when the record already holds this attempt's outcome (a finish
-- whose reply was lost, sent again) it answers as the first time did.
local r = rec_load(KEYS[1])
if not r then return {0} end
local function answer(version)
  local kept = 0
  if r[OWNER] == ARGV[2] and (r[ST] == 'scheduled' or r[ST] == 'retrying') then kept = 1 end
  return {1, tonumber(r[FIRE]), version or run_get(r)[V], kept, tonumber(r[ATT])}
end
if r[ST] ~= 'firing' or r[OWNER] ~= ARGV[2] then
  if rec_last(r) == ARGV[4] then return answer() end
  return {0}
end
local now, t = tonumber(ARGV[8]), run_get(r)
rec_attempt(r, ARGV[4], ARGV[14])

-- Takes the timer out of this instance's claims, into state `to` (placed
-- by the caller).
local function leave(to)
  unplace(KEYS[1], ARGV[1], r)
  r[ST], r[OWNER] = to, ''
end

local function final(state)
  leave(state)
  place(KEYS[1], ARGV[1], r, ARGV[8])
  ix_trim(KEYS[1], ARGV[1], state, ARGV[8], ARGV[7])
  if t[RSV] ~= 0 or t[FLAG] ~= 0 or t[NEXT] ~= 0 then
    t[RSV], t[FLAG], t[NEXT] = 0, 0, 0
    run_set(r, t)
  end
  if state == 'failed' then redis.call('ZADD', KEYS[2], ARGV[8], ARGV[1]) end
  rec_save_final(KEYS[1], r, ARGV[7])
  return answer(t[V])
end

local function paused()
  leave('paused')
  place(KEYS[1], ARGV[1], r, ARGV[8])
  r[ATT] = '0'
  t[RSV], t[FLAG], t[NEXT] = 0, 0, 0
  run_set(r, t)
  rec_save(KEYS[1], r)
  return answer(t[V])
end

local function wait_for(fire, state)
  leave(state)
  r[FIRE] = string.format('%d', fire)
  rec_place(KEYS[1], ARGV[1], r, ARGV[6] == '1' and ARGV[9] or '-1', ARGV[2])
  run_set(r, t)
  rec_save(KEYS[1], r)
  return answer(t[V])
end

local outcome = ARGV[3]
if outcome == 'failed' then return final('failed') end
if outcome == 'delivered' then return final('delivered') end
if t[FLAG] == 2 or outcome == 'stop' then return final('cancelled') end
if outcome == 'retry' then
  if t[FLAG] == 1 then return paused() end
  return wait_for(tonumber(ARGV[5]), 'retrying')
end
-- a recurring run succeeded: its successor
local times = tonumber(ARGV[12])
if times > 0 and t[RUNS] >= times then return final('delivered') end
if t[FLAG] == 1 then return paused() end
local every, override, next = tonumber(ARGV[10]), tonumber(ARGV[13]), nil
if t[RSV] == 1 then
  next = now
elseif t[NEXT] > 0 then
  next = t[NEXT]
elseif override >= 0 then
  next = now + override
elseif ARGV[11] == 'rate' then
  local plan = t[PLAN] > 0 and t[PLAN] or now
  next = plan + every
  if next <= now then -- the run overran: skip the missed slots, no burst
    next = plan + (math.floor((now - plan) / every) + 1) * every
  end
else
  next = now + every
end
t[RSV], t[NEXT] = 0, 0
r[ATT] = '0'
return wait_for(next, 'scheduled')
