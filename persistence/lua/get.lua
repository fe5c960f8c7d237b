-- get: a timer's record and history, for GET /timers/{id} (a record of an
-- older layout is upgraded first, so readers decode one layout only).
-- KEYS: 1 timer key
-- Returns {record, history} or {} when there is no such timer.
local r, v = rec_get(KEYS[1])
if not v then return {} end
return {v, redis.call('GET', hist_key(KEYS[1])) or ''}
