-- counts: read one partition's counts of a namespace's queues (the prelude's
-- "counts" keeps them), with its timers due but not begun; or rebuild the
-- counts of timers written before counts existed, a slice per call.
-- KEYS: 1 the partition's counts hash (hw:{P}:cn)
-- ARGV: 1 op
--   read    2 namespace ('*': every namespace), 3 now_ms, 4 timer key prefix
--           "hw:{P}:t:", 5 budget (due entries examined at most)
--        -> {rebuilt, truncated, {field, count, ...}, {"<ns>/<queue>", due,
--           oldest due ms, ...}}: rebuilt 1 once the rebuild of the
--           partition ended (counts before that miss timers not yet
--           counted); the second list holds the waiting timers (scheduled,
--           retrying; not firing) whose due time is <= now: in the
--           namespace's indexes (no instance holds them) or in a claimed
--           zset (an instance holds them, in its wheel or waiting for a
--           permit of its queue). Each is examined from a prefix of its
--           record (its queue); truncated 1 when more than budget entries
--           were due (the list then counts only the soonest due of each
--           zset examined).
--   rebuild 2 timer key prefix, 3 SCAN count
--        -> {counted, more}: one SCAN step over the partition's timer keys
--           (its cursor in hw:{P}:cn:scan); each timer not yet counted is
--           counted and marked. When the scan ends hw:{P}:cn:v is set and
--           later calls return {0, 0} at once. Safe beside every other
--           function and beside other instances' rebuilds: the mark in the
--           head makes each timer counted exactly once.
local op = ARGV[1]
local done_key, scan_key = KEYS[1] .. ':v', KEYS[1] .. ':scan'
if op == 'rebuild' then
  if redis.call('EXISTS', done_key) == 1 then return {0, 0} end
  local res = redis.call('SCAN', redis.call('GET', scan_key) or '0', 'MATCH', ARGV[2] .. '*',
                         'COUNT', tonumber(ARGV[3]))
  local counted = 0
  for _, tk in ipairs(res[2]) do
    local r, v = rec_peek(tk)
    local b = r and count_bucket(r.st, r.att)
    if r and r.cnt == 0 and COUNTED[b] then
      count_step(tk, key_id(tk), tail_decode(v).queue, r, b, b)
      head_put(tk, r)
      counted = counted + 1
    end
  end
  if res[1] == '0' then
    redis.call('SET', done_key, '1')
    redis.call('DEL', scan_key)
    return {counted, 0}
  end
  redis.call('SET', scan_key, res[1])
  return {counted, 1}
end
if op ~= 'read' then return redis.error_reply('counts: unknown op') end

local ns, now, prefix, budget = ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local all, base = ns == '*', key_base(ARGV[4])
local counts = {}
local h = redis.call('HGETALL', KEYS[1])
for i = 1, #h, 2 do
  if all or string.sub(h[i], 1, #ns + 1) == ns .. '/' then
    counts[#counts + 1] = h[i]
    counts[#counts + 1] = h[i + 1]
  end
end

local due, order, truncated = {}, {}, 0
local function note(id, r, v)
  local k = id_ns(id) .. '/' .. tail_decode(v).queue
  local d = due[k]
  if not d then
    d = {0, r.fire}
    due[k] = d
    order[#order + 1] = k
  end
  d[1] = d[1] + 1
  if r.fire < d[2] then d[2] = r.fire end
end
-- The due entries of zset zk: of an index (owner NO_OWNER, state st) or of
-- the claimed zset of owner (st nil: any waiting state).
local function scan(zk, owner, st)
  if budget <= 0 then
    if redis.call('ZCOUNT', zk, '-inf', now) > 0 then truncated = 1 end
    return
  end
  local ids = redis.call('ZRANGEBYSCORE', zk, '-inf', now, 'LIMIT', 0, budget + 1)
  if #ids > budget then truncated = 1 end
  for i = 1, math.min(#ids, budget) do
    local id = ids[i]
    if all or id_ns(id) == ns then
      local r, v = rec_peek(prefix .. id)
      if r and r.owner == owner and is_waiting(r.st) and (not st or r.st == st) and r.fire <= now then
        note(id, r, v)
      end
    end
  end
  budget = budget - math.min(#ids, budget)
end
local spaces = all and redis.call('SMEMBERS', base .. 'nss') or {ns}
for _, n in ipairs(spaces) do
  for _, st in ipairs({'scheduled', 'retrying'}) do scan(base .. 'ix:' .. n .. ':' .. st, NO_OWNER, st) end
end
for _, tag in ipairs(redis.call('SMEMBERS', base .. 'holders')) do
  if #tag == 16 then scan(claimed_key(prefix, tag), tag, nil) end
end
local out = {}
for _, k in ipairs(order) do
  out[#out + 1] = k
  out[#out + 1] = due[k][1]
  out[#out + 1] = due[k][2]
end
return {redis.call('EXISTS', done_key), truncated, counts, out}
