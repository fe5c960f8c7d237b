-- finish: record the outcomes of attempts this instance began, for the
-- timers of one partition whose attempts ended together (one call for the
-- batch), and for a recurring timer schedule its next run (the Circulation
-- Trigger rules: a fire or reschedule that arrived during the run decides
-- the next run; a pause or cancel that arrived during it stops it here).
-- KEYS: the timer keys
-- ARGV: 1 this instance's owner tag, 2 now_ms, 3 retention_ms, 4 horizon_ms
--       (a next attempt due by then stays claimed in this instance's wheel,
--       when the timer's keep is "1"), 5 attempts kept in the history,
--       6 the call's time budget (us, see budget_start), then for the i-th
--       timer (from 7 + 9(i-1)): id, outcome (delivered | retry
--       | failed | next: a recurring run succeeded | stop: a recurring run
--       answered 410 | requeue: the attempt never left this instance, as when
--       it had no socket: due again at next fire_ms, and not counted), the
--       attempt (JSON), next fire_ms (retry, requeue; next of a calendar
--       schedule: its next slot), keep,
--       repeat.every_ms, fixed_rate ("1"), repeat.times (0: no limit), the
--       callback's Hookwheel-Next-Delay-Ms (-1: none)
-- Returns five numbers per timer it took (all of them, unless its budget
-- ran out: then the first ones, and the caller sends the rest again): ok,
-- fire_ms, version, kept, attempts; ok is 0 when the timer is no longer
-- this instance's firing timer (one this instance holds waiting, its begin
-- lost, goes back to its index), and kept is 1 when it waits in this
-- instance's claims for its next attempt at fire_ms. Repeating it is safe:
-- when the history already starts with this attempt (a finish whose reply
-- was lost, sent again) it answers as the first time did.
local me, now, retention, horizon, keep_hist = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5]
local now_s = ARGV[2] -- (a score given as a string is not formatted again)
local out = {}

local function answer(r)
  local kept = (r.owner == me and is_waiting(r.st)) and 1 or 0
  out[#out + 1] = 1
  out[#out + 1] = r.fire
  out[#out + 1] = r.ver
  out[#out + 1] = kept
  out[#out + 1] = r.att
end

-- The final state an outcome leads to, or nil when the timer waits again.
-- A cancel that arrived during a recurring run decides whatever the run's
-- own outcome: its answer (202) promised cancelled, and a cancelled timer
-- is no dead letter and calls neither callback.
local function final_state(r, outcome, times)
  if r.flag == 2 then return 'cancelled' end
  if outcome == 'failed' or outcome == 'delivered' then return outcome end
  if outcome == 'stop' then return 'cancelled' end
  if outcome == 'next' and times > 0 and r.runs >= times then return 'delivered' end
  return nil
end

-- When a recurring timer's next run is due after a run that succeeded.
local function next_run(r, a)
  local every, override, slot = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 8]), tonumber(ARGV[a + 3])
  if r.rsv == 1 then return now end
  if r.next > 0 then return r.next end
  if every == 0 then return slot end -- a calendar schedule: the next slot, from the engine
  if override >= 0 then return now + override end
  if ARGV[a + 6] ~= '1' then return now + every end
  local plan = r.plan > 0 and r.plan or now -- fixed_rate
  local nxt = plan + every
  if nxt <= now then -- the run overran: skip the missed slots, no burst
    nxt = plan + (math.floor((now - plan) / every) + 1) * every
  end
  return nxt
end

-- One timer's outcome (its arguments from ARGV[a]).
local function one(tk, a)
  local id, outcome, attempt = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  local r, v = rec_peek(tk) -- (the head, and the queue for the counts)
  if not r or r.st ~= 'firing' or r.owner ~= me then
    if r and hist_last(tk) == attempt then return answer(r) end
    if r and r.owner == me and is_waiting(r.st) then
      -- Held by this instance and waiting, though this attempt began: its
      -- begin was lost (a failover to a replica that had the claim but not
      -- the begin). The job finishing now is what held it, and drops it, so
      -- the timer goes back to its index for a sweep to claim it again:
      -- left held, no one would ever attempt it.
      unplace(tk, id, r)
      r.owner = NO_OWNER
      place(tk, id, r, r.fire)
      head_put(tk, r)
    end
    for _ = 1, 5 do out[#out + 1] = 0 end
    return
  end
  local final = final_state(r, outcome, tonumber(ARGV[a + 7]))
  local queue, from = tail_queue(v), count_bucket('firing', r.att)
  if final then
    count_step(tk, id, queue, r, from, final)
    -- the record, written whole once more with its history at its end
    -- (_record.lua), unless it is long (the peek holds a short one whole)
    local whole = #v < PEEK and v or redis.call('STRLEN', tk) <= HIST_INLINE_MAX and redis.call('GET', tk)
    if whole then
      to_final(tk, id, r, final, now_s, retention, false,
               {body = string.sub(whole, HEAD + 1), hist = hist_join(tk, r, attempt, keep_hist)})
    else
      hist_add(tk, r, attempt, keep_hist, retention)
      to_final(tk, id, r, final, now_s, retention, true)
    end
    if r.cb == 1 and final ~= 'cancelled' then callback_create(tk, id, r, final, now, attempt) end
    return answer(r)
  end
  hist_add(tk, r, attempt, keep_hist, nil)
  unplace(tk, id, r)
  if outcome == 'requeue' then -- the attempt never left: it does not count
    r.att = r.att - 1
    if r.att == 0 then r.runs = r.runs - 1 end
  end
  if r.flag == 1 then -- a pause arrived during the run
    -- a calendar schedule resumes at the slot it was paused at: after a run
    -- that succeeded that is its next slot, not the one that just ran
    -- (and one paused between attempts, at the slot of the run that ended)
    if outcome == 'next' and tail_decode(v).every < 0 then
      r.fire = tonumber(ARGV[a + 3])
    else
      pause_at_slot(r, tail_decode(v).every)
    end
    r.st, r.owner, r.att = 'paused', NO_OWNER, 0
    run_clear(r)
    place(tk, id, r, now_s)
  else
    if outcome == 'retry' or outcome == 'requeue' then
      r.fire, r.st = tonumber(ARGV[a + 3]), r.att > 0 and 'retrying' or 'scheduled'
    else -- a recurring run succeeded: its successor
      r.fire, r.st = next_run(r, a), 'scheduled'
      run_clear(r)
      r.att = 0
    end
    hold_or_index(tk, id, r, ARGV[a + 4] == '1' and horizon or '-1', me)
  end
  count_step(tk, id, queue, r, from, r.st)
  head_put(tk, r)
  return answer(r)
end

local n = batch_keys(KEYS)
budget_start(ARGV[6], n)
batched(function()
  for i = 1, n do
    if budget_spent(i) then break end
    one(KEYS[i], 7 + 9 * (i - 1))
  end
end)
return out
