-- select: one partition's part of a selector operation (POST /timers/cancel,
-- pause, resume, reschedule; dry_run lists): the namespace's timers that
-- have every label given, walked in the first label's index (chunk by
-- chunk, then its bucket's packed entries, then its long ones, each in id
-- order (lb_walk), so a cursor (chunk, id) is exact: every timer that keeps
-- the label is met once), filtered by queue and state, confirmed by the
-- record's own labels (labels_hold), and each match given
-- the instruction exactly as the one-timer call would (cancel_one,
-- control_one: an instruction to a timer in its attempt is too late, or
-- waits for the run's end). At most `limit` matches and `budget`
-- index entries a call, so one call holds Redis for about a millisecond.
-- KEYS: 1 the idempotency record of this call (hw:{P}:ik:<ns>:<key>:<cursor>;
--       not read without a key)
-- ARGV: 1 timer key prefix "hw:{P}:t:", 2 namespace, 3 op ('cancel' |
--       'pause' | 'resume' | 'reschedule' | 'list'), 4 queue ('' any),
--       5 state ('' any), 6 first chunk, 7 id after which to start in it
--       ('' from its start), 8 limit, 9 budget, 10 now_ms, 11 retention_ms,
--       12 fire_ms (reschedule), 13 idempotency key ('' none), 14 the
--       request's fingerprint, 15... the labels ("key:value")
-- Returns {replayed, next_chunk, next_id, more, id, code, state, queue, ...}:
-- code 1 done, 2 done for after the current run (a recurring timer), 0 too
-- late (state: where it is); queue: its queue when this call cancelled it
-- (for the metrics), else ''; replayed 1 when the answer is the one this
-- idempotency key got before, -1 (alone) when that key came with another
-- request.
-- Op 'key' only keeps the fingerprint of the request an idempotency key
-- came with first, for 24 h, in KEYS[1] (the key's record in a partition
-- of its own, hw:{P}:ik:<ns>:<key>:66:..., a place no call starts at):
-- every page under the key asks first, so a key that came with another
-- request is refused whatever the cursor. Returns {0, 0, '', 0}, or {-1}.
if ARGV[3] == 'key' then
  local fp = redis.call('GET', KEYS[1])
  if fp and fp ~= ARGV[14] then return {-1} end
  if not fp then redis.call('SET', KEYS[1], ARGV[14], 'PX', 86400000) end
  return {0, 0, '', 0}
end
if ARGV[13] ~= '' then
  local saved = redis.call('GET', KEYS[1])
  if saved then
    local rec = cjson.decode(saved)
    if rec.fp ~= ARGV[14] then return {-1} end
    rec.out[1] = 1
    return rec.out
  end
end
local prefix, ns, op, queue, state = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local limit, budget, now, retention = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), ARGV[11]
local fire = tonumber(ARGV[12])
local base, labels = key_base(prefix), {unpack(ARGV, 15)}
local out, found, examined = {0, LB_LAST + 1, '', 0}, 0, 0
local chunk, after = tonumber(ARGV[6]), ARGV[7]
-- A cursor of a build before packed entries: its bucket place held every
-- entry the long way, which is the long entries' place now.
if chunk == LB_CHUNKS and after ~= '' and not id_packed(after) then chunk = LB_LAST end

local function matches(id, r, v)
  if r.lb ~= 1 then return false end -- (an entry of an expired timer whose id has no labels now)
  if state ~= '' and r.st ~= state then return false end
  if queue ~= '' and tail_decode(v).queue ~= queue then return false end
  for i = 2, #labels do
    if not lb_has(base, ns, id, labels[i]) then return false end
  end
  -- the record decides (an entry of an id's expired timer is not a label of
  -- the timer created again under it); a long record is read whole, and its
  -- length counts against the budget (one entry a KB), so a call that meets
  -- big specs decodes at most about budget KB of them
  local whole = #v < PEEK and v or redis.call('GET', prefix .. id)
  examined = examined + math.floor(#whole / 1024)
  return labels_hold(whole, labels)
end

local function apply(tkey, id, r, v)
  if op == 'list' then return 1, '' end
  if op == 'cancel' then
    local code, by_this = cancel_one(tkey, id, r, v, now, retention)
    return code, by_this == 1 and tail_decode(v).queue or ''
  end
  return (control_one(tkey, id, r, v, op, now, fire, -1, NO_OWNER)), ''
end

while chunk <= LB_LAST and found < limit and examined < budget do
  local want = math.min(200, budget - examined)
  local ids, last, read = lb_walk(base, ns, labels[1], chunk, after, want)
  for _, id in ipairs(ids) do
    examined = examined + 1
    after = id
    local tkey = prefix .. id
    local r, v = rec_peek(tkey)
    if not r then
      -- the entry of a timer gone: labels_trim drops its entries once its
      -- record expired, but builds before this one lost some (an expiry
      -- less than 1 ms away was taken for none): dropped where met
      labels_index(tkey, id, {labels[1]}, 'ZREM')
    elseif matches(id, r, v) then
      local code, q = apply(tkey, id, r, v)
      out[#out + 1] = id
      out[#out + 1] = code
      out[#out + 1] = r.st
      out[#out + 1] = q
      found = found + 1
    end
    if found >= limit or examined >= budget then break end
  end
  if found >= limit or examined >= budget then
    out[2], out[3], out[4] = chunk, after, 1
    break
  end
  if read < want then chunk, after = chunk + 1, '' -- else the chunk goes on after the last entry read
  else after = last end
end
if out[4] == 1 and after ~= '' then
  -- a stop at a chunk's last entry: the walk goes on at the next chunk
  -- (an entry read but not returned, of an id met elsewhere, is an entry)
  local _, _, read = lb_walk(base, ns, labels[1], chunk, after, 1)
  if read == 0 then
    out[2], out[3] = chunk + 1, ''
    if chunk + 1 > LB_LAST then out[4] = 0 end
  end
end
if ARGV[13] ~= '' then
  redis.call('SET', KEYS[1], cjson.encode({fp = ARGV[14], out = out}), 'PX', 86400000)
end
return out
