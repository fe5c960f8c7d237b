-- A timer is one string key hw:{P}:t:<id> holding nine lines:
--   state, fire_ms, attempts, created, owner, when, last, run, spec
-- (created is "created_ms request_id", or created_ms alone when the creating
-- request had no id)
-- (last and spec are compact JSON, so they hold no raw newline). One string
-- costs far less Redis memory than a hash of the same fields, whose spec
-- value is too long for the compact listpack encoding. This prelude is put
-- in front of every script.
local ST, FIRE, ATT, CREATED, OWNER, WHEN, LAST, RUN, SPEC = 1, 2, 3, 4, 5, 6, 7, 8, 9

local function rec_parse(v)
  local r, pos = {}, 1
  for i = 1, SPEC - 1 do
    local nl = string.find(v, '\n', pos, true)
    if not nl then return nil end
    r[i] = string.sub(v, pos, nl - 1)
    pos = nl + 1
  end
  r[SPEC] = string.sub(v, pos)
  return r
end

-- The id of the request that created the timer, or ''.
local function rec_rid(r)
  local sp = string.find(r[CREATED], ' ', 1, true)
  return sp and string.sub(r[CREATED], sp + 1) or ''
end

local function rec_load(key)
  local v = redis.call('GET', key)
  if not v then return nil, nil end
  return rec_parse(v), v
end

-- KEEPTTL: a finished timer keeps its retention countdown.
local function rec_save(key, r)
  redis.call('SET', key, table.concat(r, '\n'), 'KEEPTTL')
end

-- Saves a timer that has just finished, starting its retention countdown
-- (one SET with PX rather than a SET and a PEXPIRE).
local function rec_save_final(key, r, retention_ms)
  redis.call('SET', key, table.concat(r, '\n'), 'PX', retention_ms)
end

-- The last line holds the latest attempts, newest first, as compact JSON
-- objects separated by tabs (compact JSON never holds a raw tab).
local function rec_last(r)
  local t = string.find(r[LAST], '\t', 1, true)
  return t and string.sub(r[LAST], 1, t - 1) or r[LAST]
end

-- Puts attempt a first, keeping at most `keep` attempts.
local function rec_attempt(r, a, keep)
  local h, n, pos = r[LAST], 1, 0
  keep = tonumber(keep)
  if h == '' or keep <= 1 then
    r[LAST] = a
    return
  end
  while true do
    local t = string.find(h, '\t', pos + 1, true)
    if not t then break end
    n = n + 1
    if n >= keep then
      h = string.sub(h, 1, t - 1)
      break
    end
    pos = t
  end
  r[LAST] = a .. '\t' .. h
end

-- The run line is the Circulation Trigger's state word, as numbers
-- "version runs reserved flag planned_ms next_ms token" (trailing zeros left out,
-- so a fresh timer's line is empty):
--   version   bumped by fire, reschedule, pause and resume; a run claimed
--             under an older version may not start (begin checks it)
--   runs      runs started (a run is an attempt 1 and its retries)
--   reserved  1: a fire arrived during a run; the next run starts right after
--   flag      what arrived during a run for after it: 1 pause, 2 cancel
--   planned   when the current run was due (fixed_rate counts from it)
--   next      a reschedule during a run: when the next run is due
--   token     the job (of the owner instance) whose attempt began: only it
--             may begin again (a begin whose reply was lost is re-sent)
local V, RUNS, RSV, FLAG, PLAN, NEXT, TOK = 1, 2, 3, 4, 5, 6, 7

-- Both run on every attempt, so they are kept cheap: a fresh timer's empty
-- line is not scanned, and numbers are joined as they are (every number here
-- stays below 10^14, which Lua prints exactly).
local function run_get(r)
  local t = {0, 0, 0, 0, 0, 0, 0}
  if r[RUN] == '' then return t end
  local i, pos, len = 1, 1, #r[RUN]
  while pos <= len and i <= 7 do
    local sp = string.find(r[RUN], ' ', pos, true) or len + 1
    t[i] = tonumber(string.sub(r[RUN], pos, sp - 1)) or 0
    i, pos = i + 1, sp + 1
  end
  return t
end

local function run_set(r, t)
  local n = 7
  while n > 0 and t[n] == 0 do n = n - 1 end
  r[RUN] = table.concat(t, ' ', 1, n)
end

-- Puts a waiting timer where the next attempt is found: in this instance's
-- claims when it is due within the horizon (the caller then holds it in its
-- wheel), else in the partition's due set for any instance's sweep.
-- Returns 1 when this instance holds it.
local function rec_place(r, id, due_key, claimed_key, horizon, instance)
  if tonumber(r[FIRE]) <= tonumber(horizon) then
    redis.call('ZADD', claimed_key, r[FIRE], id)
    r[OWNER] = instance
    return 1
  end
  redis.call('ZADD', due_key, r[FIRE], id)
  r[OWNER] = ''
  return 0
end

-- Listing indexes: one zset per namespace and state in each partition,
-- hw:{P}:ix:<namespace>:<state>, member the timer's key id. Scores: the due
-- time for scheduled and retrying (listed soonest first), the time it got
-- there for the others (finished states are listed newest first). Every
-- state change goes through rec_state, so a timer is in exactly the index
-- of its state, with one exception that saves two commands per attempt: a
-- timer in its attempt ('firing', set by begin without rec_state) stays in
-- the index it waited in, scheduled for a first attempt, retrying for a
-- later one. Finished entries older than the retention are trimmed now and
-- then (ix_trim).
local function ix_key(tkey, id, state)
  local ns = string.match(id, '^(.*)/') or ''
  return string.match(tkey, '^(hw:{[^}]*}:)') .. 'ix:' .. ns .. ':' .. state
end

local function rec_state(tkey, id, r, to, score)
  local from = r[ST]
  if from == 'firing' then from = tonumber(r[ATT]) <= 1 and 'scheduled' or 'retrying' end
  if from and from ~= '' then redis.call('ZREM', ix_key(tkey, id, from), id) end
  r[ST] = to
  redis.call('ZADD', ix_key(tkey, id, to), score, id)
end

-- Drops index entries of finished timers whose records have expired: on
-- one finish in 64 (by the clock), which is often enough for an index that
-- only a listing reads (it skips and drops expired entries itself).
local function ix_trim(tkey, id, state, now, retention)
  if tonumber(now) % 64 ~= 0 then return end
  redis.call('ZREMRANGEBYSCORE', ix_key(tkey, id, state), '-inf', tonumber(now) - tonumber(retention))
end
