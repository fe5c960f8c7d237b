-- migrate: bring one partition's keys of an earlier layout to this one, a
-- slice per call (run by every instance at start until it answers 0 more).
-- Releases before the waiting index became the due set kept a waiting timer
-- no instance held in hw:{P}:due as well: its timers move to their indexes
-- and the zset goes once empty. (Records of the nine-line layout are brought
-- over on first read instead, by the prelude's upgrade: no call has to find
-- them first.) Releases before this one also kept every dead letter in
-- hw:{P}:failed, a zset nothing read and nothing trimmed when the records
-- expired, so it only grew: it goes at the first call (UNLINK: freed off
-- Redis's main thread, however long it grew).
-- KEYS: 1 the partition's old due zset (hw:{P}:due), 2 the old dead-letter
--       zset (hw:{P}:failed)
-- ARGV: 1 timer key prefix "hw:{P}:t:", 2 limit
-- Returns {moved, more}.
redis.call('UNLINK', KEYS[2])
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
local moved = 0
for _, id in ipairs(ids) do
  local tk = ARGV[1] .. id
  local r = head_get(tk)
  if r and is_waiting(r.st) and r.owner == NO_OWNER then
    place(tk, id, r, r.fire)
    moved = moved + 1
  end
end
if #ids > 0 then redis.call('ZREM', KEYS[1], unpack(ids)) end
return {moved, redis.call('EXISTS', KEYS[1])}
