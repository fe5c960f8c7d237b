-- release: hand every claim of an instance back (shutdown, a takeover of a
-- dead instance, or the start of an instance that reuses its id): waiting
-- timers go back to their index for any instance's sweep. A timer that was
-- firing had its attempt interrupted (an instance may stop or die between
-- its begin and its finish): the prelude's hand_back_firing retries it, or
-- pauses or cancels it when a pause or cancel arrived during that run.
-- KEYS: 1 the instance's claimed zset, 2 the instance's last claimed batch
--       (deleted: nothing is left to replay), 3 and 4 the same two under
--       the names of the layout before this one (claimed:<instance>,
--       lastclaim:<instance>)
-- ARGV: 1 timer key prefix "hw:{P}:t:", 2 now_ms, 3 the attempt (JSON) an
--       interrupted attempt is recorded as, 4 retention_ms, 5 attempts kept
--       in the history, 6 the instance's owner tag, 7 the instance id, 8 at
--       most this many claims a call (so that a call never holds Redis long
--       while other instances' begins wait)
-- Returns {handed, more}: the number of timers handed back, and 1 when
-- claims are left for the next call.
local n, now, limit = 0, tonumber(ARGV[2]), tonumber(ARGV[8])
local ids = redis.call('ZRANGE', KEYS[1], 0, limit - 1)
for _, id in ipairs(ids) do
  local tk = ARGV[1] .. id
  local r, v = rec_peek(tk) -- (the head, and the queue for the counts)
  -- (the claimed zset itself loses them below, so nothing is unplaced)
  if r and r.owner == ARGV[6] and is_waiting(r.st) then
    r.owner = NO_OWNER
    place(tk, id, r, r.fire)
    head_put(tk, r)
    n = n + 1
  elseif r and r.owner == ARGV[6] and r.st == 'firing' then
    hand_back_firing(tk, id, r, v, now, ARGV[3], ARGV[4], ARGV[5])
    n = n + 1
  end
end
if #ids == limit then -- these are done; the next call takes those after them
  for i = 1, #ids, 512 do redis.call('ZREM', KEYS[1], unpack(ids, i, math.min(i + 511, #ids))) end
  if redis.call('EXISTS', KEYS[1]) == 1 then return {n, 1} end
end
-- Claims an instance of the older build left: reading the record upgrades
-- it, and the upgrade hands such a claim back.
for _, id in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  if head_get(ARGV[1] .. id) then n = n + 1 end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], revoked_key(ARGV[1], ARGV[6]))
redis.call('SREM', key_base(ARGV[1]) .. 'holders', ARGV[6], ARGV[7])
return {n, 0}
