-- list: one partition's part of a page of GET /timers (a listing index, see
-- the prelude). Entries are taken in index order after the cursor: by score
-- then id ascending ('asc', scheduled and retrying: soonest due first), or
-- both descending ('desc': newest first), exactly as ZRANGE / ZREVRANGE
-- order them, so the cursor is a position that survives other entries
-- coming and going. At most `budget` entries are examined, so a page never
-- costs more than that whatever the filter.
-- KEYS: 1 the index zset
-- ARGV: 1 timer key prefix "hw:{P}:t:", 2 'asc' | 'desc', 3 cursor score
--       ('' for the first page), 4 cursor key id, 5 limit, 6 queue ('' any),
--       7 budget
-- Returns {more, last_score, last_id, id, score, record, id, score, record, ...}
-- for up to limit matches; more is 1 when the index holds entries after the
-- last one examined (last_score, last_id; '' when none was).
local key, asc = KEYS[1], ARGV[2] == 'asc'
local limit, budget = tonumber(ARGV[5]), tonumber(ARGV[7])

-- The rank just after the cursor, whether or not its entry is still there.
local function start_rank()
  if ARGV[3] == '' then return 0 end
  local cs, cid = tonumber(ARGV[3]), ARGV[4]
  local sc = redis.call('ZSCORE', key, cid)
  if sc and tonumber(sc) == cs then
    return (asc and redis.call('ZRANK', key, cid) or redis.call('ZREVRANK', key, cid)) + 1
  end
  local n = asc and redis.call('ZCOUNT', key, '-inf', '(' .. ARGV[3])
                or redis.call('ZCOUNT', key, '(' .. ARGV[3], '+inf')
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', key, ARGV[3], ARGV[3])) do
    if (asc and id <= cid) or (not asc and id >= cid) then n = n + 1 end
  end
  return n
end

local out, found, scanned, stale = {0, '', ''}, 0, 0, {}
local rank = start_rank()
local total = redis.call('ZCARD', key)
while found < limit and scanned < budget and rank < total do
  local n = math.min(budget - scanned, 200)
  local batch = asc and redis.call('ZRANGE', key, rank, rank + n - 1, 'WITHSCORES')
                    or redis.call('ZREVRANGE', key, rank, rank + n - 1, 'WITHSCORES')
  if #batch == 0 then break end
  for i = 1, #batch, 2 do
    local id, score = batch[i], batch[i + 1]
    scanned = scanned + 1
    rank = rank + 1
    out[2], out[3] = score, id
    local raw = redis.call('GET', ARGV[1] .. id)
    if not raw then
      stale[#stale + 1] = id -- its record expired: drop the entry after the scan
    elseif ARGV[6] == '' or (cjson.decode(rec_parse(raw)[SPEC]).queue or 'default') == ARGV[6] then
      out[#out + 1] = id
      out[#out + 1] = score
      out[#out + 1] = raw
      found = found + 1
    end
    if found == limit or scanned == budget then break end
  end
end
if rank < total then out[1] = 1 end
if #stale > 0 then redis.call('ZREM', key, unpack(stale)) end
return out
