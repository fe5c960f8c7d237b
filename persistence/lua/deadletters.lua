-- deadletters: replay or purge one partition's failed timers of a namespace
-- (its failed listing index), optionally of one queue, at most `limit` of
-- them per call so Redis is never held long.
-- KEYS: 1 the namespace's failed index (hw:{P}:ix:<ns>:failed), 2 failed zset
-- ARGV: 1 timer key prefix "hw:{P}:t:", 2 'replay' | 'purge', 3 queue ('' any),
--       4 now_ms, 5 limit
-- Returns {done, more}: more is 1 when failed timers may be left.
local done, examined, rank, limit = 0, 0, 0, tonumber(ARGV[5])
local more = 0
while examined < limit do
  local ids = redis.call('ZREVRANGE', KEYS[1], rank, rank + math.min(limit - examined, 200) - 1)
  if #ids == 0 then break end
  for _, id in ipairs(ids) do
    examined = examined + 1
    local tk = ARGV[1] .. id
    local r = rec_load(tk)
    if not r or r[ST] ~= 'failed' then
      redis.call('ZREM', KEYS[1], id) -- expired or moved on: not a dead letter
    elseif ARGV[3] == '' or (cjson.decode(r[SPEC]).queue or 'default') == ARGV[3] then
      redis.call('ZREM', KEYS[2], id)
      if ARGV[2] == 'purge' then
        redis.call('ZREM', KEYS[1], id)
        redis.call('DEL', tk)
      else -- a new series of attempts, due now, under the same id
        local t = run_get(r)
        t[V] = t[V] + 1
        t[RSV], t[FLAG], t[NEXT] = 0, 0, 0
        run_set(r, t)
        r[ATT] = '0'
        r[FIRE] = ARGV[4]
        unplace(tk, id, r)
        r[ST], r[OWNER] = 'scheduled', ''
        place(tk, id, r, ARGV[4])
        rec_save(tk, r)
        redis.call('PERSIST', tk)
      end
      done = done + 1
    else
      rank = rank + 1 -- another queue's: stays, and is stepped over
    end
  end
end
if redis.call('ZCARD', KEYS[1]) > rank then more = 1 end
return {done, more}
