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

-- Where a timer is found. A timer some instance holds (owner set: waiting
-- in its wheel, or firing) is in that instance's claimed zset,
-- hw:{P}:claimed:<instance>, by due time, and nowhere else. Any other is in
-- the listing index of its namespace and state, hw:{P}:ix:<namespace>:<state>,
-- member its key id: by due time while waiting (scheduled, retrying; these
-- are what sweeps claim, so the index is the due set too), by the time it got
-- there otherwise (paused and finished states, listed newest first). So a
-- pending timer costs one zset entry, and a listing of a waiting state
-- merges the index with the claimed zsets (list.lua). Two registries let a
-- script find those zsets within the partition: hw:{P}:nss, the namespaces
-- that have waiting timers in an index (for sweeps), and hw:{P}:holders,
-- the instances that have a claimed zset (for listings). Every change of
-- state or owner goes through unplace and place.
local function key_base(tkey) return string.match(tkey, '^(hw:{[^}]*}:)') end
local function id_ns(id) return string.match(id, '^(.*)/') or '' end

local function ix_key(tkey, id, state)
  return key_base(tkey) .. 'ix:' .. id_ns(id) .. ':' .. state
end

local function place_key(tkey, id, r)
  if r[OWNER] ~= '' then return key_base(tkey) .. 'claimed:' .. r[OWNER] end
  return ix_key(tkey, id, r[ST])
end

-- Takes the timer out of where it is found; call before changing its state
-- or owner (a record being created has state '': nowhere yet).
local function unplace(tkey, id, r)
  if r[ST] ~= '' then redis.call('ZREM', place_key(tkey, id, r), id) end
end

-- Puts the timer where its state and owner say, at score (its due time
-- while it waits, else now).
local function place(tkey, id, r, score)
  redis.call('ZADD', place_key(tkey, id, r), score, id)
  if r[OWNER] ~= '' then
    redis.call('SADD', key_base(tkey) .. 'holders', r[OWNER])
  elseif r[ST] == 'scheduled' or r[ST] == 'retrying' then
    redis.call('SADD', key_base(tkey) .. 'nss', id_ns(id))
  end
end

-- Places a waiting timer (state already set) where its next attempt is
-- found: held by this instance when it is due within the horizon (the
-- caller then holds it in its wheel), else in its index for any instance's
-- sweep. Returns 1 when this instance holds it.
local function rec_place(tkey, id, r, horizon, instance)
  local held = tonumber(r[FIRE]) <= tonumber(horizon)
  r[OWNER] = held and instance or ''
  place(tkey, id, r, r[FIRE])
  return held and 1 or 0
end

-- The state a listing of waiting timers shows a timer under: a timer in its
-- attempt (firing) under the one it waited in, scheduled for a first attempt,
-- retrying for a later one.
local function waiting_state(r)
  if r[ST] == 'firing' then return tonumber(r[ATT]) <= 1 and 'scheduled' or 'retrying' end
  return r[ST]
end

-- Drops index entries of finished timers whose records have expired: on
-- one finish in 64 (by the clock), which is often enough for an index that
-- only a listing reads (it skips and drops expired entries itself).
local function ix_trim(tkey, id, state, now, retention)
  if tonumber(now) % 64 ~= 0 then return end
  redis.call('ZREMRANGEBYSCORE', ix_key(tkey, id, state), '-inf', tonumber(now) - tonumber(retention))
end
