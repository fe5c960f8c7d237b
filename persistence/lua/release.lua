-- release: hand every claim of an instance back (shutdown, a takeover of a
-- dead instance, or the start of an instance that reuses its id): waiting
-- timers go back to their index for any instance's sweep. A timer that was
-- firing had its attempt interrupted: it counts, and the timer is retried at
-- once, unless a pause or cancel arrived during that run (then it is paused
-- or cancelled).
-- KEYS: 1 the instance's claimed zset, 2 the instance's last claimed batch
--       (deleted: nothing is left to replay)
-- ARGV: 1 timer key prefix "hw:{P}:t:", 2 now_ms, 3 last-attempt JSON for
--       interrupted attempts, 4 retention_ms, 5 attempts kept in the
--       history, 6 the instance id
-- Returns the number of timers handed back.
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
local n = 0
for _, id in ipairs(ids) do
  local tk = ARGV[1] .. id
  local r = rec_load(tk)
  -- (the claimed zset itself is deleted below, so nothing is unplaced)
  if r and (r[ST] == 'scheduled' or r[ST] == 'retrying') then
    r[OWNER] = ''
    place(tk, id, r, r[FIRE])
    rec_save(tk, r)
    n = n + 1
  elseif r and r[ST] == 'firing' then
    local t = run_get(r)
    r[OWNER] = ''
    rec_attempt(r, ARGV[3], ARGV[5])
    if t[FLAG] == 0 then
      r[FIRE] = ARGV[2]
      r[ST] = 'retrying'
    else
      r[ST] = t[FLAG] == 1 and 'paused' or 'cancelled'
      r[ATT] = '0'
      t[FLAG], t[RSV], t[NEXT] = 0, 0, 0
      run_set(r, t)
    end
    place(tk, id, r, ARGV[2])
    if r[ST] == 'cancelled' then rec_save_final(tk, r, ARGV[4]) else rec_save(tk, r) end
    n = n + 1
  end
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SREM', key_base(ARGV[1]) .. 'holders', ARGV[6])
return n
