-- held: the timers this instance's claims in one partition show firing, for
-- the engine to compare with the jobs it holds. A failover can lose the
-- finish of an attempt (the engine's steps do not wait for replicas): the
-- new master then shows the timer firing, held by this live instance,
-- whose job was dropped once the old master recorded the outcome. Nothing
-- else would hand it back (handback.lua does, for what the engine no longer
-- holds). Only claims due by `until` are examined: an attempt begins at most
-- its begin lead before its due time and ends after it, so a lost finish's
-- timer is there, while the claims waiting for later (most of them) are not
-- read. At most `limit` of them from `offset` on, so a call stays short.
-- KEYS: 1 this instance's claimed zset
-- ARGV: 1 timer key prefix "hw:{P}:t:", 2 this instance's owner tag, 3 until
--       (ms, the claims' scores are due times), 4 offset, 5 limit
-- Returns {next, id, token, attempt, run, ...}: one quadruple per firing
-- timer held by this instance (the job whose attempt began, the attempt and
-- the run it is in); next is the offset to go on from, 0 when done.
local offset, limit = tonumber(ARGV[4]), tonumber(ARGV[5])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[3], 'LIMIT', ARGV[4], ARGV[5])
local out = {#ids >= limit and offset + #ids or 0}
for _, id in ipairs(ids) do
  local r = head_get(ARGV[1] .. id)
  if r and r.st == 'firing' and r.owner == ARGV[2] then
    out[#out + 1] = id
    out[#out + 1] = r.tok
    out[#out + 1] = r.att
    out[#out + 1] = r.runs
  end
end
return out
