-- cancel: exact cancel of one timer (cancel_one, in the prelude).
-- KEYS: 1 timer key
-- ARGV: 1 id, 2 retention_ms, 3 now_ms
-- Returns {code, record, history}: code 1 cancelled (now or before), 2
-- cancelled once its current run ends, 0 too late; or {-1} unknown. A
-- cancel made by this call (not before) carries a fourth element, 1.
local r, v = rec_get(KEYS[1])
if not r then return {-1} end
local code, by_this = cancel_one(KEYS[1], ARGV[1], r, v, ARGV[3], ARGV[2])
return {code, redis.call('GET', KEYS[1]), redis.call('GET', hist_key(KEYS[1])) or '', by_this == 1 and 1 or nil}
