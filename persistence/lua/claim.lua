-- claim: move timers due within the window from the partition's waiting
-- indexes (every namespace's scheduled and retrying, see the prelude) to
-- this instance's claims, soonest due first (with a share of the call for
-- each namespace, below), at most `limit` of them (the caller keeps the
-- limit small, so one call never holds Redis long).
-- KEYS: 1 the partition's namespace registry (hw:{P}:nss), 2 this instance's
--       claimed zset, 3 this instance's last claimed batch in this partition
--       (a list of ids)
-- ARGV: 1 horizon_ms (claim fire_ms <= horizon), 2 limit, 3 this instance's
--       owner tag, 4 timer key prefix "hw:{P}:t:" (same hash tag, so the same
--       slot), 5 replay ("1": the reply to the previous claim was lost;
--       return its timers again, those still waiting and still ours),
--       6 ns_cap (at most this many of one namespace; 0: no cap), 7 ns_room
--       ("<ns>=<n>," for each namespace that may take fewer: n, its room
--       under the cap in the instance's memory), 8 the call's time budget
--       (us, see budget_start)
-- Returns {n, more, revoked_1, ..., revoked_n, id, record, id, record, ...}:
-- more is 1 when the budget ran out before the limit was reached (more may
-- be due: the caller claims again soon), then the revocations of this
-- instance in the partition ("<version> <id>", see
-- revoke(); taken off the list, at most REVOKED_MAX a call), then one pair
-- per claimed timer: its id and its record as this call read it (its head
-- still without the owner this call wrote in place: the owner is the
-- caller). A limit of 0 only reads the revocations.
local REVOKED_MAX = 4096
budget_start(ARGV[8], tonumber(ARGV[2]))
local rk = revoked_key(ARGV[4], ARGV[3])
local revoked = redis.call('LRANGE', rk, 0, REVOKED_MAX - 1)
if #revoked > 0 then redis.call('LTRIM', rk, #revoked, -1) end
local out = {#revoked, 0}
for i = 1, #revoked do out[i + 2] = revoked[i] end
local batch = {}
local function take(id, v)
  out[#out + 1] = id
  out[#out + 1] = v
  batch[#batch + 1] = id
end
if ARGV[5] == '1' then
  for _, id in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
    local r, v = rec_get(ARGV[4] .. id)
    if r and r.owner == ARGV[3] and is_waiting(r.st) then take(id, v) end
  end
end
local limit, base = tonumber(ARGV[2]), key_base(ARGV[4])
local now = redis.call('TIME')
labels_trim(base, tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000), 64)
if limit <= 0 then return out end
-- A namespace's room in this call: its entry in ns_room, else ns_cap (0:
-- no cap: the limit).
local ns_cap, room = tonumber(ARGV[6]) or 0, {}
for ns, n in string.gmatch(ARGV[7] or '', '([^,=]*)=(%d+),') do room[ns] = tonumber(n) end
-- The due entries of every waiting index, soonest first (ties by id, as a
-- zset orders them), at most limit in all and a namespace's room of it.
-- Each index answers its entries in that order already: they are merged,
-- not sorted (a flood due at one instant ties on every score).
local runs, nss, total = {}, 0, 0
for _, ns in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local found, r, some = 0, limit, false
  if ns_cap > 0 then r = math.min(limit, room[ns] or ns_cap) end
  for _, st in ipairs({'scheduled', 'retrying'}) do
    local ik = base .. 'ix:' .. ns .. ':' .. st
    local got = r > 0 and redis.call('ZRANGEBYSCORE', ik, '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', '0',
                                     r == limit and ARGV[2] or r) or {}
    if #got > 0 then
      local run = {}
      for i = 1, #got, 2 do run[#run + 1] = {tonumber(got[i + 1]), got[i], ik, got[i + 1], ns} end
      runs[#runs + 1] = run
      total, some = total + #run, true
    end
    if #got > 0 or redis.call('EXISTS', ik) == 1 then found = 1 end
  end
  if found == 0 then redis.call('SREM', KEYS[1], ns) end -- nothing waits there any more
  if some then nss = nss + 1 end
  room[ns] = r
end
local function before(a, b) return a[1] < b[1] or (a[1] == b[1] and bytes_lt(a[2], b[2])) end
local due = runs[1] or {}
if #runs > 1 then
  due = {}
  local at = {}
  for k = 1, #runs do at[k] = 1 end
  for _ = 1, total do
    local best
    for k = 1, #runs do
      local e = runs[k][at[k]]
      if e and (not best or before(e, runs[best][at[best]])) then best = k end
    end
    due[#due + 1] = runs[best][at[best]]
    at[best] = at[best] + 1
  end
end
-- More due than the call takes, of several namespaces: the namespaces
-- take turns, each its soonest first, up to an equal share of the limit
-- each, then the rest go in due order. A namespace's flood due at one
-- instant would otherwise fill every call until it was all claimed (or its
-- cap reached), and another namespace's timers due just after it would be
-- claimed late. Turns rather than each namespace's share in one piece: a
-- call its time budget cuts short has still given each its turns.
if #due > limit and nss > 1 and limit >= nss then
  local share, lists, order = math.floor(limit / nss), {}, {}
  for i = 1, #due do
    local ns = due[i][5]
    local l = lists[ns]
    if not l then
      l = {}
      lists[ns] = l
      order[#order + 1] = ns
    end
    l[#l + 1] = due[i]
  end
  local first, taken = {}, {}
  for turn = 1, share do
    for _, ns in ipairs(order) do
      local e = turn <= room[ns] and lists[ns][turn]
      if e then
        first[#first + 1] = e
        taken[e] = true
      end
    end
  end
  for i = 1, #due do
    if not taken[due[i]] then first[#first + 1] = due[i] end
  end
  due = first
end
local holders = base .. 'holders'
if #ARGV[3] ~= #NO_OWNER then error('hookwheel: an owner tag is ' .. #NO_OWNER .. ' bytes') end
batched(function()
  local taken = 0
  for i = 1, #due do
    if taken == limit then break end
    if budget_spent(i) then
      out[2] = 1
      break
    end
    local id, tk, ns = due[i][2], ARGV[4] .. due[i][2], due[i][5]
    if room[ns] > 0 then -- (a namespace's scheduled and retrying entries share its room)
      room[ns] = room[ns] - 1
      taken = taken + 1
      local st, fire, owner, v = rec_sfo(tk)
      zs_rem(due[i][3], id) -- (an entry of a timer gone or not waiting there is stale)
      if st and is_waiting(st) and owner == NO_OWNER then
        -- place(): at the index's score as Redis wrote it (the due time: a
        -- number would be formatted again), and the holder registered (once)
        zs_add(KEYS[2], fire == due[i][1] and due[i][4] or fire, id)
        set_add(holders, ARGV[3])
        redis.call('SETRANGE', tk, OWNER_AT, ARGV[3]) -- (the owner's 16 bytes, in place)
        -- the record as read: the caller takes everything but the owner
        -- from it, and the owner is the caller (persistence/timers.c)
        take(id, v)
      end
    end
  end
end)
redis.call('DEL', KEYS[3])
for i = 1, #batch, 1000 do
  redis.call('RPUSH', KEYS[3], unpack(batch, i, math.min(i + 999, #batch)))
end
return out
