-- list: one partition's part of a page of GET /timers. Entries are taken in
-- order after the cursor: by score then id ascending ('asc', scheduled and
-- retrying: soonest due first), or both descending ('desc': newest first),
-- exactly as ZRANGE / ZREVRANGE order them, so the cursor is a position that
-- survives other entries coming and going. A waiting state's timers are in
-- its index while no instance holds them and in the holder's claimed zset
-- while one does (see the prelude), so an 'asc' listing merges the index
-- with every claimed zset of the partition, taking from those only the
-- namespace's timers that wait in (or fire from) the state listed. At most
-- `budget` entries are examined, and the call stops once the records it
-- returns reach `max_bytes` (it always returns at least one match it finds),
-- so one call holds Redis for a bounded time whatever the filter, the
-- records' size or the number of entries sharing a score: with a queue or
-- label filter (or in a claimed zset, which holds other namespaces' timers)
-- an entry is examined from a prefix of its record (the head and the queue),
-- and only a match is read whole.
-- KEYS: 1 the index zset
-- ARGV: 1 timer key prefix "hw:{P}:t:", 2 'asc' | 'desc', 3 cursor score
--       ('' for the first page), 4 cursor key id, 5 limit, 6 queue ('' any),
--       7 budget, 8 the namespace, 9 the state, 10 max_bytes, 11 label
--       ("key:value", '' any: a timer with it is in its label index, and
--       its record has it)
-- Returns {more, last_score, last_id, id, score, record, history, ...} for up
-- to limit matches; more is 1 when the sources hold entries after the
-- last one examined (last_score, last_id; '' when none was).
local asc = ARGV[2] == 'asc'
local limit, budget, max_bytes = tonumber(ARGV[5]), tonumber(ARGV[7]), tonumber(ARGV[10])

-- The rank just after the cursor in key, whether or not its entry is there.
local function start_rank(key)
  if ARGV[3] == '' then return 0 end
  local cs, cid = tonumber(ARGV[3]), ARGV[4]
  local sc = redis.call('ZSCORE', key, cid)
  if sc and tonumber(sc) == cs then
    return (asc and redis.call('ZRANK', key, cid) or redis.call('ZREVRANK', key, cid)) + 1
  end
  -- Ranks lo..hi-1 hold the cursor's score, their ids in order: a binary
  -- search over them (O(log n) calls, however many share the score).
  local lo = asc and redis.call('ZCOUNT', key, '-inf', '(' .. ARGV[3])
                 or redis.call('ZCOUNT', key, '(' .. ARGV[3], '+inf')
  local hi = lo + redis.call('ZCOUNT', key, ARGV[3], ARGV[3])
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local id = (asc and redis.call('ZRANGE', key, mid, mid) or redis.call('ZREVRANGE', key, mid, mid))[1]
    if (asc and not bytes_lt(cid, id)) or (not asc and not bytes_lt(id, cid)) then lo = mid + 1 else hi = mid end
  end
  return lo
end

-- A source: a zset read in order from a rank, up to 200 entries at a time
-- (never more than the budget: each source may hold many).
local sources = {}
local function add_source(key, held)
  sources[#sources + 1] = {key = key, held = held, rank = start_rank(key),
                           total = redis.call('ZCARD', key), buf = {}, i = 1}
end
local function head(s)
  if s.i > #s.buf then
    if s.rank >= s.total then return nil end
    local last = s.rank + math.min(200, budget) - 1
    s.buf = asc and redis.call('ZRANGE', s.key, s.rank, last, 'WITHSCORES')
                or redis.call('ZREVRANGE', s.key, s.rank, last, 'WITHSCORES')
    s.i = 1
    if #s.buf == 0 then s.total = s.rank return nil end
  end
  return s.buf[s.i], s.buf[s.i + 1]
end

local waiting = ARGV[9] == 'scheduled' or ARGV[9] == 'retrying'
add_source(KEYS[1], false)
if waiting then
  local base = key_base(ARGV[1])
  for _, h in ipairs(redis.call('SMEMBERS', base .. 'holders')) do add_source(base .. 'cl:' .. h, true) end
end

-- Whether a record belongs in this listing: an index entry must still be
-- in the state (a waiting one also unheld); a claimed entry must be the
-- namespace's and wait in, or fire from, the state.
local function belongs(r, held, id)
  if not held then return r.st == ARGV[9] and (not waiting or r.owner == NO_OWNER) end
  return id_ns(id) == ARGV[8] and waiting_state(r) == ARGV[9]
end

local out, found, scanned, bytes, stale = {0, '', ''}, 0, 0, 0, {}
-- Without a filter an entry is read whole at once; with one, it is examined
-- from a prefix of its record first (a spec may be large, and most entries
-- may not match).
local whole = ARGV[6] == '' and ARGV[11] == ''
while found < limit and scanned < budget and bytes < max_bytes do
  local best, bid, bsc
  for _, s in ipairs(sources) do
    local id, sc = head(s)
    if id then
      local n = tonumber(sc)
      if not best or (asc and (n < bsc or (n == bsc and bytes_lt(id, bid)))) or
          (not asc and (n > bsc or (n == bsc and bytes_lt(bid, id)))) then
        best, bid, bsc = s, id, n
      end
    end
  end
  if not best then break end
  local score = best.buf[best.i + 1]
  best.i, best.rank, scanned = best.i + 2, best.rank + 1, scanned + 1
  out[2], out[3] = score, bid
  local tk, r, pre, raw = ARGV[1] .. bid
  if whole and not best.held then
    r, raw = rec_get(tk) -- (an index's entry is listed unless stale: one read, not a peek and a read)
  else
    r, pre = rec_peek(tk)
  end
  if not r then
    if not best.held then stale[#stale + 1] = bid end -- its record expired: drop the entry after the scan
  elseif belongs(r, best.held, bid) then
    raw = raw or (ARGV[6] == '' or tail_decode(pre).queue == ARGV[6]) and
                 (ARGV[11] == '' or (r.lb == 1 and lb_has(key_base(ARGV[1]), ARGV[8], bid, ARGV[11]))) and
                 rec_read(tk)
    -- (with a label, the record decides: labels_hold)
    if raw and (ARGV[11] == '' or labels_hold(raw, {ARGV[11]})) then
      local hist = r.hist == 1 and hist_read(tk) or '' -- (no key: none, or in the record)
      out[#out + 1] = bid
      out[#out + 1] = score
      out[#out + 1] = raw
      out[#out + 1] = hist
      found, bytes = found + 1, bytes + #raw + #hist
    end
  elseif not best.held then
    stale[#stale + 1] = bid -- an index entry of a timer that moved on
  end
end
for _, s in ipairs(sources) do
  if s.rank < s.total then out[1] = 1 end
end
if #stale > 0 and not READ_ONLY then redis.call('ZREM', KEYS[1], unpack(stale)) end
return out
