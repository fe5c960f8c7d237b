-- create_batch: store the new timers of one partition, each as create does
-- (a new timer, an idempotent repeat, or a conflict), in one call.
-- KEYS: the timer keys, one per timer
-- ARGV: 1 atomic ('1': when any timer conflicts, none is written), then per
--       timer: its id, its record (as create's), the number of its labels,
--       then its labels
-- Returns {code, state} per timer, in order: code 1 created, 0 a timer
-- with the same spec and due time exists (an idempotent repeat), 2 another
-- timer holds the id (state: its state), 3 not written (atomic: another
-- timer of the call conflicted). A timer repeating an id of the call is
-- compared with the first.
local n = batch_keys(KEYS)
local items, pos = {}, 2
for i = 1, n do
  local nl = tonumber(ARGV[pos + 2])
  items[i] = {id = ARGV[pos], rec = ARGV[pos + 1], labels = {unpack(ARGV, pos + 3, pos + 2 + nl)}}
  pos = pos + 3 + nl
end
local function same(a, b)
  return string.sub(a, tail_decode(a).same_from) == string.sub(b, tail_decode(b).same_from)
end
-- First what each would do: an id stored before, or earlier in the call.
local out, seen, conflict = {}, {}, false
for i = 1, n do
  local it = items[i]
  local prev = seen[it.id]
  if prev then
    if same(prev.rec, it.rec) then it.code, it.state = 0, prev.state or 'scheduled'
    else it.code, it.state = 2, prev.state or 'scheduled' end
    it.of_new = prev.state == nil -- a repeat of an item of this call, not of a stored timer
  else
    local r, v = rec_get(KEYS[i])
    if v then
      it.code, it.state = same(v, it.rec) and 0 or 2, r.st
      seen[it.id] = {rec = v, state = r.st}
    else
      it.code, it.state = 1, ''
      seen[it.id] = {rec = it.rec}
    end
  end
  if it.code == 2 then conflict = true end
end
local atomic = ARGV[1] == '1' and conflict
-- The writes, as create.lua's (place, count_add, labels_index), batched
-- (the prelude's batched: one ZADD per zset, one SADD per registry and one
-- HINCRBY per count field for the whole call). place() and count_add()
-- written out for a new scheduled record, with the partition's key prefix
-- made once: calling them cost Redis about 1.5 us more a timer.
local base = n > 0 and key_base(KEYS[1]) or ''
batched(function()
  for i = 1, n do
    local it = items[i]
    if it.code == 1 then
      if atomic then
        it.code = 3
      else
        local r, ns = new_head(it.rec), id_ns(it.id)
        redis.call('SET', KEYS[i], it.rec)
        if r.owner ~= NO_OWNER then
          zs_add(base .. 'cl:' .. r.owner, r.fire, it.id)
          set_add(base .. 'holders', r.owner)
        else
          zs_add(base .. 'ix:' .. ns .. ':scheduled', r.fire, it.id)
          set_add(base .. 'nss', ns)
        end
        hash_incr(base .. 'cn', ns .. '/s' .. tail_queue(it.rec), 1)
        if #it.labels > 0 then labels_index(KEYS[i], it.id, it.labels, 'ZADD') end
      end
    elseif it.code == 0 and it.of_new and atomic then
      it.code = 3 -- the item it repeats was not written
    end
    out[#out + 1] = it.code
    out[#out + 1] = it.state
  end
end)
return out
