-- deadletters: replay or purge one partition's failed timers of a namespace
-- (its failed listing index), optionally of one queue, at most `limit` of
-- them per call, examining at most 5 x limit entries (from a prefix of each
-- record: the spec is never copied), so Redis is never held long.
-- KEYS: 1 the namespace's failed index (hw:{P}:ix:<ns>:failed)
-- ARGV: 1 timer key prefix "hw:{P}:t:", 2 'replay' | 'purge', 3 queue ('' any),
--       4 now_ms, 5 limit
-- Returns {done, more}: more is 1 when failed timers may be left.
-- With a queue, the other queues' failed timers are stepped over; where a
-- call stops before the end of the index it keeps the last one it stepped
-- over (hw:{P}:ix:<ns>:failed>q:<queue>, for 10 minutes), and the next call
-- goes on after it, so repeated calls reach every failed timer of the
-- queue however many of other queues come first, and end with more 0.
local done, examined, rank, limit = 0, 0, 0, tonumber(ARGV[5])
local budget, more = 5 * limit, 0
local skip_key = ARGV[3] ~= '' and (KEYS[1] .. '>q:' .. ARGV[3]) or nil
if skip_key then
  local last = redis.call('GET', skip_key)
  local at = last and redis.call('ZREVRANK', KEYS[1], last)
  if at then rank = at + 1 end
end
while done < limit and examined < budget do
  local ids = redis.call('ZREVRANGE', KEYS[1], rank, rank + math.min(limit - done, budget - examined, 200) - 1)
  if #ids == 0 then break end
  for _, id in ipairs(ids) do
    examined = examined + 1
    local tk = ARGV[1] .. id
    local r, v = rec_peek(tk)
    if not r or r.st ~= 'failed' then
      redis.call('ZREM', KEYS[1], id) -- expired or moved on: not a dead letter
    elseif ARGV[3] == '' or tail_decode(v).queue == ARGV[3] then
      if ARGV[2] == 'purge' then
        redis.call('ZREM', KEYS[1], id)
        if r.lb == 1 then labels_drop(tk, id, redis.call('GET', tk)) end
        redis.call('DEL', tk, hist_key(tk))
      else -- a new series of attempts, due now, under the same id
        r.ver = r.ver + 1
        run_clear(r)
        replay_run(r)
        r.att, r.fire = 0, tonumber(ARGV[4])
        unplace(tk, id, r)
        count_step(tk, id, tail_decode(v).queue, r, r.st, 'scheduled')
        r.st, r.owner = 'scheduled', NO_OWNER
        place(tk, id, r, ARGV[4])
        keep_forever(tk, r)
        head_put(tk, r)
      end
      done = done + 1
    else
      rank = rank + 1 -- another queue's: stays, and is stepped over
    end
  end
end
if redis.call('ZCARD', KEYS[1]) > rank then more = 1 end
if skip_key then
  if more == 1 and rank > 0 then
    redis.call('SET', skip_key, redis.call('ZREVRANGE', KEYS[1], rank - 1, rank - 1)[1], 'PX', 600000)
  else
    redis.call('DEL', skip_key)
  end
end
return {done, more}
