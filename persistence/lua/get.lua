-- get: a timer's record and history, for GET /timers/{id} (a record of an
-- older layout is upgraded first, so readers decode one layout only; the
-- read-only twin, get_ro, returns it upgraded without writing it).
-- KEYS: 1 timer key
-- Returns {record, history, skipped} or {} when there is no such timer;
-- skipped is the count of a calendar schedule's skipped slots (0: none).
local r, v = rec_get(KEYS[1])
if not v then return {} end
local skipped = 0
if r.sk == 1 then
  skipped = tonumber(redis.call('HGET', skipped_key(KEYS[1]), string.sub(KEYS[1], #key_base(KEYS[1]) + 3)) or 0)
end
return {v, hist_read(KEYS[1]), skipped}
