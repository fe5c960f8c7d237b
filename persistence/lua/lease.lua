-- lease: every change to a watchdog lease (/leases), one atomic call each.
-- ARGV[1] names the operation; the rest of KEYS/ARGV is per operation.
-- One script rather than one per operation so that the helpers below
-- (compare-and-extend, retire, describe) exist once.
--
-- Keys (service/leases.h), for a lease id <lid> ("<namespace>/<key>" when
-- the API runs with tokens, else "<key>"; "key" below always means the lid):
--   <prefix><lid>              string: the owner, PX ttl (the lock others read)
--   hw:lease:token:<lid>       counter: the last fencing token drawn (never reset)
--   hw:lease:meta:<lid>        hash: the live lease's settings and life signs
--   hw:lease:meta:<lid>#<tok>  hash: an expired lease whose on_expire is pending
--   hw:lease:schedule          zset: member (<lid> or <lid>#<tok>) -> next look (ms)
--   hw:lease:held              zset: <lid> -> 0 for every live lease, read in lex
--                              order by 'list' (GET /leases): acquire adds, release
--                              and retire remove, renew adds again (a lease made by
--                              a build without the index is in it after a period)
-- Members of the schedule name their metadata hash: meta prefix .. member.
-- Scripts touch keys they build from these names, so leases need a single
-- Redis (not Cluster).
--
-- Meta fields: key, owner, token, ttl, acquired, hb (last heartbeat), probe_ok
-- (last 2xx from probe_url), alive (last sign of life: acquire, heartbeat or
-- probe), renewed (last extension), silent ('1': the last look found the
-- holder silent and did not renew), probe (url or ''), expire (on_expire's
-- stored spec or ''), when ('delay_ms=N'), params (what an idempotent
-- re-acquire compares: ttl, probe, expire and when), state ('held' or
-- 'expired').

local OP = ARGV[1]

local function meta_load(mk)
  local flat = redis.call('HGETALL', mk)
  local m = {}
  for i = 1, #flat, 2 do m[flat[i]] = flat[i + 1] end
  return m
end

local function fmt(n) return string.format('%d', n) end

-- The renewal period: a third of the ttl, as the watchdog (service/watchdog.c).
local function period(ttl) return math.floor(ttl / 3) end

-- renew.lua's compare-and-extend, without its recreate: a user lease whose
-- key is gone stays gone (watchdog_add's "user lock" case).
local function compare_and_extend(lk, holder, ttl)
  if redis.call('GET', lk) == holder then
    redis.call('PEXPIRE', lk, ttl)
    return 1
  end
  return 0
end

-- A heartbeat or a successful probe. A holder that had fallen silent (no
-- sign of life within ttl, or the last look found it so: 'silent', set by
-- that look, which then looks again only when the key expires) is looked at
-- again at once, so renewal resumes while its key still exists. (The mark
-- covers a sign of life stamped just inside the ttl that arrives just after
-- a look stamped just outside it: instances' clocks and calls interleave.)
local function seen(mk, m, now, field, sched, member)
  local silent = now - tonumber(m.alive) > tonumber(m.ttl) or m.silent == '1'
  redis.call('HSET', mk, field, fmt(now), 'alive', fmt(now))
  m[field] = fmt(now)
  m.alive = fmt(now)
  if silent then redis.call('ZADD', sched, fmt(now), member) end
end

-- The live lease `member` ended without a release (its key expired). Without
-- on_expire its metadata goes; with one it moves to member#token, to be
-- offered to a worker at offer_ms, until a worker confirms the timer exists.
local function retire(sched, held, meta_prefix, member, m, now, offer_ms)
  local mk = meta_prefix .. member
  redis.call('ZREM', sched, member)
  redis.call('ZREM', held, member)
  if (m.expire or '') == '' then
    redis.call('DEL', mk)
    return nil
  end
  local pending = member .. '#' .. m.token
  redis.call('RENAME', mk, meta_prefix .. pending)
  redis.call('HSET', meta_prefix .. pending, 'state', 'expired', 'expired', fmt(now))
  redis.call('ZADD', sched, fmt(offer_ms), pending)
  return pending
end

-- What GET shows: {holder, pttl, token, ttl, acquired, hb, probe_ok,
-- renewed, alive, probe, expire, when}; token '' when the key is not held
-- by a lease of hookwheel's (set by someone else).
local function describe(v, pttl, m)
  if m.owner ~= v or m.state ~= 'held' then
    return {v, pttl, '', '', '', '', '', '', '', '', '', ''}
  end
  return {v, pttl, m.token, m.ttl, m.acquired, m.hb or '0', m.probe_ok or '0', m.renewed or '0',
          m.alive, m.probe or '', m.expire or '', m.when or ''}
end

local function reply(code, v, pttl, m)
  local out = describe(v, pttl, m)
  table.insert(out, 1, code)
  return out
end

-- acquire: SET NX PX and a new fencing token.
-- KEYS: 1 lease key, 2 token counter, 3 meta, 4 schedule, 5 held index
-- ARGV: 2 key, 3 owner, 4 ttl_ms, 5 now_ms, 6 probe_url, 7 on_expire stored
--       spec, 8 its when, 9 meta prefix
-- Returns {code, describe...}: 1 acquired; 0 this owner holds it with these
-- settings already (counted as a heartbeat); 2 another owner holds it; 3 this
-- owner holds it with other settings.
if OP == 'acquire' then
  local now, ttl = tonumber(ARGV[5]), tonumber(ARGV[4])
  local params = table.concat({ARGV[4], ARGV[6], ARGV[7], ARGV[8]}, '\n')
  local v = redis.call('GET', KEYS[1])
  local m = meta_load(KEYS[3])
  if v then
    local pttl = redis.call('PTTL', KEYS[1])
    if v ~= ARGV[3] or m.owner ~= ARGV[3] or m.state ~= 'held' then return reply(2, v, pttl, m) end
    if m.params ~= params then return reply(3, v, pttl, m) end
    seen(KEYS[3], m, now, 'hb', KEYS[4], ARGV[2])
    return reply(0, v, pttl, m)
  end
  -- The key is free. A lease whose expiry no worker has seen yet (they look
  -- every tick) hands its on_expire over first, for any worker to create.
  if m.owner then retire(KEYS[4], KEYS[5], ARGV[9], ARGV[2], m, now, now) end
  local token = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ttl)
  redis.call('DEL', KEYS[3])
  redis.call('HSET', KEYS[3], 'key', ARGV[2], 'owner', ARGV[3], 'token', token, 'ttl', ARGV[4],
             'acquired', ARGV[5], 'alive', ARGV[5], 'probe', ARGV[6], 'expire', ARGV[7],
             'when', ARGV[8], 'params', params, 'state', 'held')
  redis.call('ZADD', KEYS[4], fmt(now + period(ttl)), ARGV[2])
  redis.call('ZADD', KEYS[5], 0, ARGV[2])
  return reply(1, ARGV[3], ttl, meta_load(KEYS[3]))
end

-- heartbeat: the holder (or a 2xx from its probe_url) says it is alive.
-- KEYS: 1 lease key, 2 meta, 3 schedule
-- ARGV: 2 key, 3 owner, 4 now_ms, 5 token ('' any), 6 field: 'hb' or 'probe_ok'
-- Returns {code, describe...}: 1 noted; 0 held by another owner or by a
-- later lease (token differs); {-1} not held.
if OP == 'heartbeat' then
  local v = redis.call('GET', KEYS[1])
  if not v then return {-1} end
  local m = meta_load(KEYS[2])
  local pttl = redis.call('PTTL', KEYS[1])
  if v ~= ARGV[3] or m.owner ~= ARGV[3] or m.state ~= 'held' or (ARGV[5] ~= '' and ARGV[5] ~= m.token) then
    return reply(0, v, pttl, m)
  end
  seen(KEYS[2], m, tonumber(ARGV[4]), ARGV[6], KEYS[3], ARGV[2])
  return reply(1, v, pttl, m)
end

-- release: unlock.lua's compare-and-delete, plus the lease's metadata. A
-- released lease never fires on_expire. The token counter stays.
-- KEYS: 1 lease key, 2 meta, 3 schedule, 4 held index
-- ARGV: 2 key, 3 owner, 4 token ('' any)
-- Returns {1, token} released; {0, describe...} held by another owner or a
-- later lease; {-1} not held.
if OP == 'release' then
  local v = redis.call('GET', KEYS[1])
  if not v then return {-1} end
  local m = meta_load(KEYS[2])
  if v ~= ARGV[3] or (ARGV[4] ~= '' and ARGV[4] ~= m.token) then
    return reply(0, v, redis.call('PTTL', KEYS[1]), m)
  end
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[4], ARGV[2])
  if m.owner == ARGV[3] and m.state == 'held' then
    redis.call('DEL', KEYS[2])
    redis.call('ZREM', KEYS[3], ARGV[2])
  end
  return {1, m.token or ''}
end

-- get: KEYS: 1 lease key, 2 meta. Returns {1, describe...} or {-1}.
if OP == 'get' then
  local v = redis.call('GET', KEYS[1])
  if not v then return {-1} end
  return reply(1, v, redis.call('PTTL', KEYS[1]), meta_load(KEYS[2]))
end

-- renew: a worker's look at the schedule. Every due entry is rescheduled in
-- this same call, so no other instance handles it again before its next
-- time: a lease is renewed once per period whichever instances run, and
-- when one dies the others' looks simply go on.
--   live, holder alive (a sign of life within ttl): compare-and-extend to
--     ttl, next look after a period; ask for a probe when probe_url is set
--     and nothing was heard for a period;
--   live, holder silent: no renewal; with probe_url ask for a probe and look
--     again after a period, else look again when the key expires;
--   key gone (expired): retire it; with on_expire, offer it now;
--   pending expiry (member#token): offer it again (the last offer's worker
--     did not confirm within retry_ms, e.g. it died).
-- An offered expiry stays until 'done'; offers repeat every retry_ms.
-- back_ms > 0: the worker's wall clock stepped back by that much since its
-- last look. The schedule's times and the holders' last signs of life were
-- written on the clock before the step, so they lie that far ahead of now:
-- left so, no renewal would fall due until the clock caught up (an hour for
-- an hour's step) while the keys' PX ran out under live holders. Before
-- looking, every entry after now moves back by back_ms (not before now), and
-- every 'alive' after now likewise (a holder that died just before the step
-- gains no life from it). Values at or before now are left: they may have
-- been written after the step. (Sent again after a lost reply, it moves
-- only what is still ahead of now: the entries a little earlier, which is
-- an early look, and no 'alive', which is at or before now by then.)
-- KEYS: 1 schedule, 2 held index
-- ARGV: 2 now_ms, 3 limit, 4 lease key prefix, 5 meta prefix, 6 retry_ms,
--       7 back_ms
-- Returns {renewed, next_ms (-1: nothing scheduled), action...}:
--   {'probe', key, token, owner, ttl, url}
--   {'expire', member, key, token, on_expire stored spec, when}
--   {'gone', key, token}: expired, without on_expire (for the log)
if OP == 'renew' then
  local sched, held, now, retry = KEYS[1], KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[6])
  local lease_prefix, meta_prefix = ARGV[4], ARGV[5]
  local out, renewed = {}, 0
  local function offer(member, m)
    out[#out + 1] = {'expire', member, m.key, m.token, m.expire, m.when}
  end
  local back = tonumber(ARGV[7]) or 0
  if back > 0 then
    local all = redis.call('ZRANGE', sched, 0, -1, 'WITHSCORES')
    for i = 1, #all, 2 do
      local member, at = all[i], tonumber(all[i + 1])
      if at > now then redis.call('ZADD', sched, fmt(math.max(now, at - back)), member) end
      local mk = meta_prefix .. member
      local alive = tonumber(redis.call('HGET', mk, 'alive'))
      if alive and alive > now then redis.call('HSET', mk, 'alive', fmt(alive - back)) end
    end
  end
  local due = redis.call('ZRANGEBYSCORE', sched, '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
  for _, member in ipairs(due) do
    local m = meta_load(meta_prefix .. member)
    if not m.owner then
      redis.call('ZREM', sched, member)
      redis.call('ZREM', held, member)
    elseif m.state == 'expired' then
      redis.call('ZADD', sched, fmt(now + retry), member)
      offer(member, m)
    else
      local lk = lease_prefix .. member
      local ttl = tonumber(m.ttl)
      local quiet = now - tonumber(m.alive)
      local probe = m.probe ~= ''
      if redis.call('GET', lk) ~= m.owner then
        local pending = retire(sched, held, meta_prefix, member, m, now, now + retry)
        if pending then offer(pending, m) else out[#out + 1] = {'gone', member, m.token} end
      elseif quiet <= ttl then
        if m.silent then redis.call('HDEL', meta_prefix .. member, 'silent') end
        renewed = renewed + compare_and_extend(lk, m.owner, ttl)
        redis.call('HSET', meta_prefix .. member, 'renewed', fmt(now))
        redis.call('ZADD', sched, fmt(now + period(ttl)), member)
        redis.call('ZADD', held, 0, member)
        if probe and quiet > period(ttl) then
          out[#out + 1] = {'probe', member, m.token, m.owner, m.ttl, m.probe}
        end
      else
        local pttl = redis.call('PTTL', lk)
        local next_ms = pttl >= 0 and now + pttl + 1 or now + period(ttl)
        if probe then
          next_ms = math.min(next_ms, now + period(ttl))
          out[#out + 1] = {'probe', member, m.token, m.owner, m.ttl, m.probe}
        end
        redis.call('ZADD', sched, fmt(next_ms), member)
        redis.call('HSET', meta_prefix .. member, 'silent', '1') -- (seen: a late sign of life looks again at once)
      end
    end
  end
  local first = redis.call('ZRANGE', sched, 0, 0, 'WITHSCORES')
  local result = {renewed, first[2] and fmt(tonumber(first[2])) or '-1'}
  for _, a in ipairs(out) do result[#result + 1] = a end
  return result
end

-- list: a namespace's live leases in key order (GET /leases), each as 'get'
-- describes it. Examines at most `budget` entries of the index after the
-- cursor, so one call holds Redis briefly whatever the page size; an entry
-- whose lease is gone altogether (released by a build without the index)
-- leaves the index; one whose key expired but is not yet retired is
-- skipped (the next look retires it).
-- KEYS: 1 held index
-- ARGV: 2 lex min, 3 lex max, 4 budget, 5 limit, 6 lease key prefix,
--       7 meta prefix, 8 '1': skip ids holding '/' (the open API's listing)
-- Returns {more (1: entries may follow the last examined), last examined id
-- ('' none), {id, describe...}...}
if OP == 'list' then
  local budget, limit = tonumber(ARGV[4]), tonumber(ARGV[5])
  local ids = redis.call('ZRANGE', KEYS[1], ARGV[2], ARGV[3], 'BYLEX', 'LIMIT', 0, budget)
  local out, found, stopped = {0, ''}, 0, false
  for _, id in ipairs(ids) do
    if found == limit then
      stopped = true
      break
    end
    out[2] = id
    if not (ARGV[8] == '1' and string.find(id, '/', 1, true)) then
      local lk = ARGV[6] .. id
      local v = redis.call('GET', lk)
      local m = meta_load(ARGV[7] .. id)
      if v then
        local d = describe(v, redis.call('PTTL', lk), m)
        table.insert(d, 1, id)
        out[#out + 1] = d
        found = found + 1
      elseif not m.owner and not READ_ONLY then -- (lease_ro: Redis refuses writes; left for later)
        redis.call('ZREM', KEYS[1], id)
      end
    end
  end
  if stopped or #ids == budget then out[1] = 1 end
  return out
end

-- done: a worker created an expired lease's on_expire timer (or found it
-- exists): forget the pending expiry.
-- KEYS: 1 schedule, 2 its meta (meta prefix .. member); ARGV: 2 member
if OP == 'done' then
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[1], ARGV[2])
  return 1
end

return redis.error_reply('lease: unknown operation ' .. tostring(OP))
