-- create_batch: store new timers, each as create does (a new timer, an
-- idempotent repeat, or a conflict), in one call. On a Redis Cluster the
-- timers of a call are of one partition; on one Redis they may be of
-- several (persistence/timers.c: one queue for all), so every write goes
-- to the keys of its own timer's partition.
-- KEYS: the timer keys, one per timer
-- ARGV: 1 atomic ('1': when any timer conflicts, none is written), then per
--       timer: its id, its record (as create's), the number of its labels,
--       then its labels.
--       Or, for a plain call (persistence/timers.c: no labels, one namespace
--       and queue, no id twice): 1 'P0' or 'P1' (atomic as above), 2 the
--       namespace, 3 the count field of its queue (create's), 4 how many of
--       the timers, first in the call, are in no instance's hands (the
--       others: held by this instance at once), 5 this instance's owner tag,
--       then per timer: its id, its record, its due time (the zset score).
-- Returns {code, state} per timer, in order: code 1 created, 0 a timer
-- with the same spec and due time exists (an idempotent repeat), 2 another
-- timer holds the id (state: its state; '' when an item of an atomic
-- call holds it, so that none is written), 3 not written (atomic: another
-- timer of the call conflicted). A timer repeating an id of the call is
-- compared with the first. A plain call whose timers are all new returns
-- {n} instead: all n created.
local n = batch_keys(KEYS)
-- The items as flat lists (a table an item would cost more than the rest
-- of its parse): id, record, where its labels start in ARGV and how many.
local ids, recs, lfrom, lnum, pos = {}, {}, {}, {}, 2
local plain = string.sub(ARGV[1], 1, 1) == 'P'
if plain then
  -- All new (the usual case): one MSETNX writes every record or none, and
  -- what create would index and count is written per partition of the
  -- call, not per timer.
  local mset = {}
  pos = 6
  for i = 1, n do
    mset[2 * i - 1], mset[2 * i] = KEYS[i], ARGV[pos + 1]
    pos = pos + 3
  end
  if n > 0 and redis.call('MSETNX', unpack(mset)) == 1 then
    local nfree, ns, me = tonumber(ARGV[4]), ARGV[2], ARGV[5]
    -- per partition (its key base): {free zset args, held zset args, count}
    local parts, bases, last, g = {}, {}, nil, nil
    pos = 6
    for i = 1, n do
      local base = key_base(KEYS[i])
      if base ~= last then
        g = parts[base]
        if not g then
          g = {{}, {}, 0}
          parts[base] = g
          bases[#bases + 1] = base
        end
        last = base
      end
      local z = i <= nfree and g[1] or g[2]
      z[#z + 1], z[#z + 2] = ARGV[pos + 2], ARGV[pos]
      g[3] = g[3] + 1
      pos = pos + 3
    end
    for _, base in ipairs(bases) do
      g = parts[base]
      if #g[1] > 0 then
        redis.call('ZADD', base .. 'ix:' .. ns .. ':scheduled', unpack(g[1]))
        redis.call('SADD', base .. 'nss', ns)
      end
      if #g[2] > 0 then
        redis.call('ZADD', base .. 'cl:' .. me, unpack(g[2]))
        redis.call('SADD', base .. 'holders', me)
      end
      redis.call('HINCRBY', base .. 'cn', ARGV[3], g[3])
    end
    return {n}
  end
  -- Some id is taken: each timer as below (nothing was written).
  pos = 6
  for i = 1, n do
    ids[i], recs[i], lfrom[i], lnum[i] = ARGV[pos], ARGV[pos + 1], pos + 3, 0
    pos = pos + 3
  end
else
  for i = 1, n do
    local nl = tonumber(ARGV[pos + 2])
    ids[i], recs[i], lfrom[i], lnum[i] = ARGV[pos], ARGV[pos + 1], pos + 3, nl
    pos = pos + 3 + nl
  end
end
-- First what each would do: an id stored before, or earlier in the call.
-- seen[id]: the index of the call's item that created it, or {rec, state}
-- of the timer stored before.
local code, state, of_new, seen, conflict = {}, {}, {}, {}, false
local stored = n > 0 and redis.call('MGET', unpack(KEYS, 1, n)) or {} -- (one call, not one a timer)
for i = 1, n do
  local prev = seen[ids[i]]
  if prev then
    local mine = type(prev) == 'number' -- a repeat of an item of this call, not of a stored timer
    code[i] = rec_same(mine and recs[prev] or prev.rec, recs[i]) and 0 or 2
    state[i], of_new[i] = mine and 'scheduled' or prev.state, mine
  else
    local r, v = rec_decode(KEYS[i], stored[i])
    if v then
      code[i], state[i] = rec_same(v, recs[i]) and 0 or 2, r.st
      seen[ids[i]] = {rec = v, state = r.st}
    else
      code[i], state[i] = 1, ''
      seen[ids[i]] = i
    end
  end
  if code[i] == 2 then conflict = true end
end
local atomic = (ARGV[1] == '1' or ARGV[1] == 'P1') and conflict
-- The writes, as create.lua's (place, count_add, labels_index), batched
-- (the prelude's batched: one MSET for the records, one ZADD per zset, one
-- SADD per registry and one HINCRBY per count field for the whole call).
-- place() and count_add() written out for a new scheduled record, with a
-- partition's keys made once a call (or a namespace): calling them cost
-- Redis about 1.5 us more a timer.
local keys_of, last, pk = {}, nil, nil -- by key base, a partition's {count key, index keys by namespace}
batched(function()
  for i = 1, n do
    if code[i] == 1 then
      if atomic then
        code[i] = 3
      else
        local id, rec = ids[i], recs[i]
        local fire, owner = new_fire_owner(rec)
        local ns = id_ns(id)
        local base = key_base(KEYS[i])
        if base ~= last then
          pk = keys_of[base]
          if not pk then
            pk = {base .. 'cn', {}}
            keys_of[base] = pk
          end
          last = base
        end
        rec_new(KEYS[i], rec)
        if owner ~= NO_OWNER then
          zs_add(base .. 'cl:' .. owner, fire, id)
          set_add(base .. 'holders', owner)
        else
          local k = pk[2][ns]
          if not k then
            k = base .. 'ix:' .. ns .. ':scheduled'
            pk[2][ns] = k
            set_add(base .. 'nss', ns)
          end
          zs_add(k, fire, id)
        end
        hash_incr(pk[1], ns .. '/s' .. tail_queue(rec), 1)
        if lnum[i] > 0 then labels_index(KEYS[i], id, {unpack(ARGV, lfrom[i], lfrom[i] + lnum[i] - 1)}, 'ZADD') end
      end
    elseif code[i] == 0 and of_new[i] and atomic then
      code[i] = 3 -- the item it repeats was not written
    elseif code[i] == 2 and of_new[i] and atomic then
      state[i] = '' -- held by an item of the call, which was not written: no timer holds it
    end
  end
end)
local out = {}
for i = 1, n do
  out[2 * i - 1] = code[i]
  out[2 * i] = state[i]
end
return out
