-- control: fire, reschedule, pause, resume or retry a timer (control_one,
-- in the prelude, has the rules), or skip a calendar schedule's missed slot.
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
local op, now = ARGV[2], tonumber(ARGV[3])
local function answer(code, held)
  return {code, redis.call('GET', KEYS[1]), redis.call('GET', hist_key(KEYS[1])) or '', held or 0}
end
local function done(held)
  head_put(KEYS[1], r)
  return answer(1, held)
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

local code, held = control_one(KEYS[1], ARGV[1], r, v, op, now, tonumber(ARGV[4]), ARGV[5], ARGV[6])
return answer(code == 0 and 0 or 1, held)
