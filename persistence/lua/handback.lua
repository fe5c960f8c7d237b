-- handback: hands back timers that this instance's claims show firing
-- though the instance runs no attempt of theirs any more (held.lua listed
-- them, and the engine holds no job for them: their finish was lost in a
-- failover), as a release hands back an interrupted attempt
-- (hand_back_firing: retried at the later of now and its due time, or
-- paused or cancelled when that arrived during the run). Each only while
-- it is still in the attempt it was listed in: firing, this instance's,
-- begun by the same job (token), the same attempt of the same run. A timer
-- that moved on meanwhile (finished, handed back, claimed and begun again,
-- held by another instance) is left alone.
-- KEYS: the timer keys
-- ARGV: 1 this instance's owner tag, 2 now_ms, 3 the attempt (JSON) the
--       lost attempt is recorded as, 4 retention_ms, 5 attempts kept in the
--       history, then for the i-th timer (from 6 + 4(i-1)): id, token,
--       attempt, run (as held.lua gave them)
-- Returns two per timer: 1 handed back (0 left alone), and the state it is
-- in now ('' when left alone).
local me, now = ARGV[1], tonumber(ARGV[2])
local out = {}
for i = 1, batch_keys(KEYS) do
  local a = 6 + 4 * (i - 1)
  local tk, id = KEYS[i], ARGV[a]
  local r, v = rec_peek(tk)
  if r and r.st == 'firing' and r.owner == me and r.tok == tonumber(ARGV[a + 1]) and
     r.att == tonumber(ARGV[a + 2]) and r.runs == tonumber(ARGV[a + 3]) then
    unplace(tk, id, r)
    hand_back_firing(tk, id, r, v, now, ARGV[3], ARGV[4], ARGV[5])
    out[#out + 1] = 1
    out[#out + 1] = r.st
  else
    out[#out + 1] = 0
    out[#out + 1] = ''
  end
end
return out
