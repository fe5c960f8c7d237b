-- The prelude: the timer's layout and the state machine's rules, written
-- once and used by every function (persistence/timers.h is the C side).
--
-- A timer is one string key hw:{P}:t:<id>: a head of fixed size, changed in
-- place (SETRANGE: no function copies or rewrites the rest), then a tail
-- written once at create and never again:
--   head (HEAD bytes, struct HEAD_FMT, little-endian):
--     magic     MAGIC: this layout (an older one starts with a state word)
--     state     one letter (STATE_CODE)
--     attempts  attempts of the current run
--     fire      due time of the next attempt (ms)
--     owner     the holding instance's tag (16 hex digits; NO_OWNER: none);
--               its claimed zset is hw:{P}:cl:<tag>
--     version   bumped by fire, reschedule, pause, resume and retry; a run
--               claimed under an older version may not start (begin)
--     runs      runs started (a run is an attempt 1 and its retries)
--     rf        bit 0 reserved (a fire arrived during a run: the next run
--               starts right after it); bits 1-2 flag (what arrived during
--               a run for after it: 1 pause, 2 cancel); bit 3 the timer has
--               a history key (so a first attempt writes it without a read);
--               bit 4 it has a count of skipped slots (hw:{P}:sk, a hash:
--               a calendar schedule's slots its misfire policy skipped)
--     planned   when the current run was due (fixed_rate and a retry's
--               deadline, retry.max_duration_ms, count from it)
--     next      a reschedule during a run: when the next run is due
--     token     the job (of the owner) whose attempt began: only it may
--               begin again (a begin whose reply was lost is re-sent)
--   tail: created_ms (i6), the creating request's id (length byte + text;
--     then, after a blank, the create's trace context: timers.c splits it),
--     then what idempotency compares: the due time as the client gave it
--     (kind byte 'd' delay_ms | 'f' fire_at/fire_at_ms | 'c' a calendar
--     schedule's first slot, value i6; 0 for 'c'), every_ms (i6; 0: one-shot,
--     -1: a calendar schedule, whose next slots the engine computes), the
--     queue (length byte + name; empty: default) and
--     the stored spec (compact JSON), then, in a finished timer's record
--     only, a byte 0 (never in compact JSON) and its attempt history.
-- So the hot functions read and write HEAD bytes, and no function decodes
-- user JSON: what they branch on (every_ms, queue) has a field of its own.
-- The attempt history (newest first, compact JSON objects separated by
-- tabs, at most attempt_history of them) is a key of its own,
-- hw:{P}:h:<id>, while the timer runs (written by finish and release
-- only, so a retry or a recurring run never rewrites the record). When
-- finish ends the timer it writes the record once more, with the history
-- at its end and its retention expiry, and deletes the key: a finished
-- timer kept for the retention is one key, not two (about 150 bytes less).
-- A record longer than HIST_INLINE_MAX keeps its history key instead (the
-- copy is bounded), and so do timers finished by a cancel or by a build
-- before this one. A history is in one of the two places, never both:
-- a dead letter run again moves it back to its key (keep_forever).
local MAGIC = 178
local HEAD_FMT, HEAD = '<BBHi6c16I4I4Bi6i6I4', 51
-- Offsets given to redis.call as strings: a Lua number argument is
-- formatted with printf on every call, which costs as much as the command.
local ZERO, HEAD_LAST = '0', (HEAD - 1) .. '' -- (concatenation: no global tostring at load)
local NO_OWNER = '0000000000000000'
local STATE_CODE = {scheduled = 's', firing = 'f', retrying = 'r', delivered = 'd', failed = 'x',
                    cancelled = 'c', paused = 'p'}
local STATE_NAME = {[115] = 'scheduled', [102] = 'firing', [114] = 'retrying', [100] = 'delivered',
                    [120] = 'failed', [99] = 'cancelled', [112] = 'paused'} -- by byte of STATE_CODE

-- The state machine. Waiting states are what sweeps claim and begin starts;
-- final states keep their record for the retention period only.
local function is_waiting(st) return st == 'scheduled' or st == 'retrying' end
local function is_final(st) return st == 'delivered' or st == 'failed' or st == 'cancelled' end

-- The timer keys of a batch call: its KEYS without the migration guard
-- (hw:{P}:~, never written) that a Redis Cluster client appends as the
-- last key (persistence/store.c: migration_guard).
local function batch_keys(KEYS)
  local n = #KEYS
  if n > 0 and string.sub(KEYS[n], -2) == ':~' then n = n - 1 end
  return n
end

-- (plain finds: these run for every timer a function touches)
local KB_KEY, KB_BASE = nil, nil -- (the last key asked about: a timer's is asked for several of its keys)
local function key_base(tkey)
  if tkey ~= KB_KEY then KB_KEY, KB_BASE = tkey, string.sub(tkey, 1, string.find(tkey, '}', 1, true) + 1) end
  return KB_BASE
end
local function id_ns(id)
  local slash = string.find(id, '/', 1, true) -- neither a namespace nor an id holds one
  return slash and string.sub(id, 1, slash - 1) or ''
end
local function hist_key(tkey)
  local base = key_base(tkey)
  return base .. 'h:' .. string.sub(tkey, #base + 3)
end

-- Whether a sorts before b byte by byte, as Redis orders a sorted set's
-- members of one score (and ZRANGEBYLEX). Lua's `<` on strings follows the
-- collation of the locale Redis runs in (strcoll; Redis takes LC_COLLATE
-- from its environment): under en_US.UTF-8 'B' < 'a' is false, so an
-- order that must agree with a sorted set's is compared here.
local function bytes_lt(a, b)
  if a == b then return false end
  local n, byte = math.min(#a, #b), string.byte
  for i = 1, n do
    local x, y = byte(a, i), byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- The head's rf byte split into its fields, for each of its 256 values
-- (rsv, flag, hist, sk, cnt, lb, cb: a lookup, not seven divisions a
-- decode), and each state's byte (STATE_CODE's).
local RF_BITS = {}
for rf = 0, 255 do
  local b = (rf - rf % 2) / 2
  RF_BITS[rf] = {rf % 2, b % 4, (b - b % 4) / 4 % 2, (b - b % 8) / 8 % 2, (b - b % 16) / 16 % 2,
                 (b - b % 32) / 32 % 2, (b - b % 64) / 64 % 2}
end
local STATE_BYTE = {scheduled = 115, firing = 102, retrying = 114, delivered = 100, failed = 120,
                    cancelled = 99, paused = 112} -- (STATE_CODE's letters: no library is there at load)

local function head_decode(v)
  local _, st, att, fire, owner, ver, runs, rf, plan, nxt, tok = struct.unpack(HEAD_FMT, v)
  local f = RF_BITS[rf]
  return {st = STATE_NAME[st], att = att, fire = fire, owner = owner, ver = ver, runs = runs,
          rsv = f[1], flag = f[2], hist = f[3], sk = f[4], cnt = f[5], lb = f[6], cb = f[7],
          plan = plan, next = nxt, tok = tok}
end

-- A head of HEAD_FMT from its fields after the magic (state by name; rf
-- whole), and from a decoded head.
local function head_pack(st, att, fire, owner, ver, runs, rf, plan, nxt, tok)
  return struct.pack(HEAD_FMT, MAGIC, STATE_BYTE[st], att, fire, owner, ver, runs, rf, plan, nxt, tok)
end
local function head_encode(r)
  return head_pack(r.st, r.att, r.fire, r.owner, r.ver, r.runs,
                   r.rsv + 2 * r.flag + 8 * r.hist + 16 * (r.sk or 0) + 32 * (r.cnt or 0) + 64 * (r.lb or 0) + 128 * (r.cb or 0),
                   r.plan, r.next, r.tok)
end

-- Where the owner is in the head (after magic, state, attempts and fire:
-- 1 + 1 + 2 + 6 bytes), so a claim writes those 16 bytes only.
local OWNER_AT = '10'

-- The queue of a whole record: after the head, created (6 bytes), the
-- request id's length and bytes, kind, due time as given and every_ms (13
-- bytes), the queue's length and bytes (none: 'default').
local function tail_queue(v)
  local qat = HEAD + 8 + string.byte(v, HEAD + 7) + 13
  local qlen = string.byte(v, qat)
  return qlen > 0 and string.sub(v, qat + 1, qat + qlen) or 'default'
end

-- The fields of the tail a function may branch on, from the whole record.
local function tail_decode(v)
  local created, rlen = struct.unpack('<i6B', v, HEAD + 1)
  local p = HEAD + 8 + rlen
  local kind, when, every, qlen = struct.unpack('<Bi6i6B', v, p)
  return {created = created, rid = string.sub(v, HEAD + 8, p - 1), every = every, queue = tail_queue(v),
          same_from = p, -- where what idempotency compares starts
          spec_from = p + 14 + qlen}
end

-- A new record's head as the service writes it: scheduled, its due time
-- and owner (this instance's tag when it holds the timer at once), its
-- counted bit set (create adds the count); only HEAD_FMT's first five
-- fields are read.
local function new_fire_owner(v)
  local _, _, _, fire, owner = struct.unpack('<BBHi6c16', v)
  return fire, owner
end
local function new_head(v)
  local fire, owner = new_fire_owner(v)
  return {st = 'scheduled', fire = fire, owner = owner}
end

local upgrade, upgraded -- below: an older layout is brought to this one on first read

-- A read-only call (the no-writes twins of get and list, which Redis runs
-- while it refuses writes: persistence/store.c) reads an older layout as
-- this one without writing it: RO_HIST[tkey] keeps the history the
-- upgrade would have moved to the timer's history key. Set by batch_reset.
local READ_ONLY, RO_HIST = false, {}

-- The head's bytes of the timer at tkey ('' when there is none); a write
-- function upgrades an older layout first (a read-only one gets its bytes
-- as they are: see head_get).
local function head_bytes(tkey)
  local v = redis.call('GETRANGE', tkey, ZERO, HEAD_LAST)
  if v ~= '' and string.byte(v, 1) ~= MAGIC and not READ_ONLY then
    upgrade(tkey)
    v = redis.call('GETRANGE', tkey, ZERO, HEAD_LAST)
  end
  return v
end

-- The head of the timer at tkey, or nil when there is none.
local function head_get(tkey)
  local v = head_bytes(tkey)
  if v == '' then return nil end
  if string.byte(v, 1) ~= MAGIC then return (upgraded(tkey, redis.call('GET', tkey))) end -- (READ_ONLY)
  return head_decode(v)
end

-- The head of the timer at tkey as HEAD_FMT's fields after the magic
-- (state by name; rf whole), or nil when there is none: for the hot
-- functions that change a few fields and write them back with head_pack,
-- without a table a timer. Write functions only (no READ_ONLY twin).
local function head_fields(tkey)
  local v = head_bytes(tkey)
  if v == '' then return nil end
  if string.byte(v, 1) ~= MAGIC then error('hookwheel: head_fields in a read-only call') end
  local _, st, att, fire, owner, ver, runs, rf, plan, nxt, tok = struct.unpack(HEAD_FMT, v)
  return STATE_NAME[st], att, fire, owner, ver, runs, rf, plan, nxt, tok
end

-- The decoded head of v, the whole record read at tkey (false: none), and
-- the record; a record of an older layout is upgraded and read again.
local function rec_decode(tkey, v)
  if not v then return nil end
  if string.byte(v, 1) ~= MAGIC then
    if READ_ONLY then
      local r, nv, hist = upgraded(tkey, v)
      RO_HIST[tkey] = hist
      return r, nv
    end
    upgrade(tkey)
    v = redis.call('GET', tkey)
  end
  return head_decode(v), v
end

-- The whole record (head and tail) and its decoded head, or nil.
local function rec_get(tkey) return rec_decode(tkey, redis.call('GET', tkey)) end

-- The state, due time and owner of the timer at tkey and its whole record,
-- or nil: what a claim looks at, without decoding the rest of the head. An
-- older layout is upgraded (rec_decode) and its record read again.
local function rec_sfo(tkey)
  local v = redis.call('GET', tkey)
  if not v then return nil end
  if string.byte(v, 1) ~= MAGIC then
    local r
    r, v = rec_decode(tkey, v)
    return r.st, r.fire, r.owner, v
  end
  local _, st, _, fire, owner = struct.unpack('<BBHi6c16', v)
  return STATE_NAME[st], fire, owner, v
end

-- The whole record of the timer at tkey in this layout, or nil.
local function rec_read(tkey)
  local v = redis.call('GET', tkey)
  if v and string.byte(v, 1) ~= MAGIC then
    local _
    _, v = rec_decode(tkey, v)
  end
  return v
end

-- The history kept in the timer's history key ('' none).
local function hist_read(tkey)
  return READ_ONLY and RO_HIST[tkey] or redis.call('GET', hist_key(tkey)) or ''
end

-- A record of this layout without the history it holds, and that history
-- (nil: it holds none). timers.c splits a record the same way.
local HIST_INLINE_MAX = 4096
local function rec_split(v)
  local z = string.find(v, '\0', tail_decode(v).spec_from, true)
  if not z then return v, nil end
  return string.sub(v, 1, z - 1), string.sub(v, z + 1)
end

-- Whether two whole records are the same timer as created: the same spec
-- and due time as the client gave them (what an idempotent repeat compares;
-- a is the stored one, which may hold a history, b a new one).
local function rec_same(a, b)
  a = rec_split(a)
  return string.sub(a, tail_decode(a).same_from) == string.sub(b, tail_decode(b).same_from)
end

-- The decoded head of tkey and a prefix of its record long enough for
-- tail_decode (request id and queue are at most 255 bytes each), or nil: a
-- timer examined without copying its spec. An older layout is read whole
-- (rec_get upgrades it).
local PEEK = HEAD + 8 + 255 + 14 + 255
local PEEK_LAST = (PEEK - 1) .. ''
local function rec_peek(tkey)
  local v = redis.call('GETRANGE', tkey, ZERO, PEEK_LAST)
  if v == '' then return nil end
  if string.byte(v, 1) ~= MAGIC then return rec_get(tkey) end
  return head_decode(v), v
end

-- Writes the head in place; a finished timer keeps its retention countdown.
local function head_put(tkey, r)
  redis.call('SETRANGE', tkey, ZERO, head_encode(r))
end

-- The timer has finished: its record and history expire after retention
-- (hist_set: its history was just written with that expiry).
local function expire_after(tkey, r, retention_ms, hist_set)
  redis.call('PEXPIRE', tkey, retention_ms)
  if r.hist == 1 and not hist_set then redis.call('PEXPIRE', hist_key(tkey), retention_ms) end
end

-- ---- labels ----
-- A label "key:value" of namespace ns is indexed per partition in one of
-- two places, a timer's entry for it in one (but see labels_index):
-- - a bucket: one of LB_BUCKETS zsets the partition's labels share,
--   hw:{P}:lbs:<ns>:<bucket> (bucket: a hash of the label), members at
--   score 0, so a label's entries are ZRANGEBYLEX ranges; while the bucket
--   has room (labels_index). A label of few timers would otherwise pay a
--   Redis key (~100 bytes) per timer. A member is "<label>\1<16 bytes>"
--   when the id (after its namespace, which the key names) is 32 lowercase
--   hex digits (id_packed: the ids hookwheel makes, and UUIDs without
--   dashes), the digits packed two to a byte, else "<label>\t<id>" (the
--   key id); neither \1 nor \t is in a label's alphabet. Builds before
--   the packed form wrote every entry the long way: such entries are read
--   and removed too. A member longer than LB_SMALL_MAX (Redis's
--   zset-max-listpack-value) would turn the bucket into a skiplist, so such
--   entries always go to the chunks.
-- - chunks: else LB_CHUNKS zsets per label and partition,
--   hw:{P}:lb:<ns>:<chunk>:<key:value>, members the key ids of its timers at
--   score 0 (ZRANGEBYLEX pages them exactly), a timer's in chunk lb_chunk(id).
--   Chunks keep each zset small enough for Redis's listpack encoding
--   (zset-max-listpack-entries, 128: up to ~8,000 timers of one label per
--   partition), where a member costs its id and ~4 bytes.
-- A label stays indexed while its timer exists: a finished timer's labels
-- are listed in hw:{P}:lx ("<id>\t<label>\t...", by when its record
-- expires), and the partition's claims drop them from the index once that
-- passes (labels_trim).
local LB_CHUNKS, LB_BUCKETS, LB_SMALL_MAX = 64, 256, 64
local LB_LAST = LB_CHUNKS + 1 -- a walk's last place (lb_walk)

-- The 32 hex digits ending a key id, as 16 bytes (nil: the id is not
-- "[<ns>/]<32 lowercase hex digits>"), and back (id_unpacked: the key id,
-- its namespace prefix given); four big-endian 32-bit words, so the bytes
-- sort as the digits do.
local function id_packed(id)
  local n, sub = #id, string.sub
  if n < 32 or (n > 32 and string.byte(id, n - 32) ~= 47) then return nil end -- 47: '/'
  local hex = n == 32 and id or sub(id, n - 31)
  if string.find(hex, '[^0-9a-f]') then return nil end
  return struct.pack('>I4I4I4I4', tonumber(sub(hex, 1, 8), 16), tonumber(sub(hex, 9, 16), 16),
                     tonumber(sub(hex, 17, 24), 16), tonumber(sub(hex, 25, 32), 16))
end
local function id_unpacked(prefix, packed)
  return prefix .. string.format('%08x%08x%08x%08x', struct.unpack('>I4I4I4I4', packed))
end
local function lb_hash(s) -- (modulo a prime: a power of two would keep only the low bits' parity pattern)
  -- h = (h * 31 + byte) % 1000003 for every byte, six bytes a step: the
  -- modulo taken once per six is the same number (a double holds
  -- 1000003 * 31^6 exactly), and no table is made for the bytes.
  local h, n, i, byte = 0, #s, 1, string.byte
  while i + 5 <= n do
    local a, b, c, d, e, f = byte(s, i, i + 5)
    h = ((((((h * 31 + a) * 31 + b) * 31 + c) * 31 + d) * 31 + e) * 31 + f) % 1000003
    i = i + 6
  end
  while i <= n do
    h = (h * 31 + byte(s, i)) % 1000003
    i = i + 1
  end
  return h
end
local function lb_chunk(id) return lb_hash(id) % LB_CHUNKS end
local function lb_key(base, ns, chunk, label) return base .. 'lb:' .. ns .. ':' .. chunk .. ':' .. label end
local function lbs_key(base, ns, label) return base .. 'lbs:' .. ns .. ':' .. (lb_hash(label) % LB_BUCKETS) end

-- The labels of a record ("key:value" strings, sorted), {} when it has none.
local function labels_of(v)
  v = rec_split(v)
  local ok, s = pcall(cjson.decode, string.sub(v, tail_decode(v).spec_from))
  local out = {}
  if ok and type(s) == 'table' and type(s.labels) == 'table' then
    for k, val in pairs(s.labels) do out[#out + 1] = k .. ':' .. tostring(val) end
  end
  table.sort(out)
  return out
end

-- Whether the record v (whole) has every label in ls ("key:value"). The
-- index alone cannot say: an id created again after its record expired has
-- the entries of its former labels until a claim drops them (labels_trim),
-- so a timer met in a label's index is a match only if its record agrees.
local function labels_hold(v, ls)
  local own = {}
  for _, l in ipairs(labels_of(v)) do own[l] = true end
  for _, l in ipairs(ls) do
    if not own[l] then return false end
  end
  return true
end

-- Adds (op 'ZADD') or removes ('ZREM') the timer's entries in its labels'
-- index. An entry goes to its label's bucket while the bucket has fewer
-- than LB_BUCKET_MAX entries (Redis's zset-max-listpack-entries: beyond it
-- the bucket would become a skiplist, at ~100 bytes an entry), else to its
-- chunk. LB_SEEN[bucket]: the bucket's size as this call knows it (a batch
-- of one partition often adds to a bucket many times); batch_reset empties
-- it. An expired timer's entries are dropped when the partition's claims
-- see it expired (labels_trim), so an id created again before that can
-- have an entry in both places: a removal removes both, and a walk skips
-- the bucket's one then (lb_walk).
local LB_BUCKET_MAX, LB_SEEN = 128, {}
-- The bucket entry of id (pk: id_packed(id)) for label l.
local function lb_member(l, id, pk) return pk and l .. '\1' .. pk or l .. '\t' .. id end

local function labels_index(tkey, id, labels, op)
  local base, ns, chunk = key_base(tkey), id_ns(id), nil -- (the chunk only when an entry goes there)
  local pk = id_packed(id)
  for _, l in ipairs(labels) do
    local m = lb_member(l, id, pk)
    local small = #m <= LB_SMALL_MAX and lbs_key(base, ns, l)
    local n = op == 'ZADD' and small and (LB_SEEN[small] or redis.call('ZCARD', small))
    if n and n < LB_BUCKET_MAX then
      LB_SEEN[small] = n + redis.call('ZADD', small, ZERO, m)
    else
      chunk = chunk or lb_chunk(id)
      if op == 'ZADD' then
        if small then LB_SEEN[small] = n end
        redis.call('ZADD', lb_key(base, ns, chunk, l), ZERO, id)
      else
        if small then
          if pk then redis.call('ZREM', small, m, l .. '\t' .. id) -- (and an entry of an older build)
          else redis.call('ZREM', small, m) end
          LB_SEEN[small] = nil
        end
        redis.call('ZREM', lb_key(base, ns, chunk, l), id)
      end
    end
  end
end

-- Whether the timer id has label l in the index (its entry's score, or false).
local function lb_has(base, ns, id, l)
  local pk = id_packed(id)
  local m = lb_member(l, id, pk)
  if #m <= LB_SMALL_MAX then
    local s
    if pk then
      s = redis.call('ZMSCORE', lbs_key(base, ns, l), m, l .. '\t' .. id)
      s = s[1] or s[2]
    else
      s = redis.call('ZSCORE', lbs_key(base, ns, l), m)
    end
    if s then return s end
  end
  return redis.call('ZSCORE', lb_key(base, ns, lb_chunk(id), l), id)
end

-- Up to `want` ids of label l after id `after` ('' from the start) in
-- place `chunk` of the walk: 0 .. LB_CHUNKS - 1 the chunks, LB_CHUNKS the
-- label's packed entries in its bucket, LB_LAST its long ones; each in id
-- order. Returns the ids, the last id read and how many entries were read.
-- An id also in a chunk, or (a long entry an older build wrote) also
-- packed, is read in the bucket but not returned: a walk meets it once.
-- `after` in the packed place is an id with a packed form.
local function lb_walk(base, ns, l, chunk, after, want)
  if chunk < LB_CHUNKS then
    local ids = redis.call('ZRANGEBYLEX', lb_key(base, ns, chunk, l), after == '' and '-' or '(' .. after, '+',
                           'LIMIT', '0', want)
    return ids, ids[#ids], #ids
  end
  local key, ids, last = lbs_key(base, ns, l), {}, nil
  local packed, ms = chunk == LB_CHUNKS, nil
  if packed then
    ms = redis.call('ZRANGEBYLEX', key, after == '' and '[' .. l .. '\1' or '(' .. l .. '\1' .. id_packed(after),
                    '(' .. l .. '\2', 'LIMIT', '0', want)
  else
    ms = redis.call('ZRANGEBYLEX', key, after == '' and '[' .. l .. '\t' or '(' .. l .. '\t' .. after,
                    '(' .. l .. '\n', 'LIMIT', '0', want)
  end
  local prefix = ns ~= '' and ns .. '/' or ''
  for _, m in ipairs(ms) do
    last = packed and id_unpacked(prefix, string.sub(m, #l + 2)) or string.sub(m, #l + 2)
    local pk = not packed and id_packed(last)
    if not (redis.call('ZSCORE', lb_key(base, ns, lb_chunk(last), l), last) or
            (pk and redis.call('ZSCORE', key, lb_member(l, last, pk)))) then
      ids[#ids + 1] = last
    end
  end
  return ids, last, #ms
end

local function lx_member(id, labels) return id .. '\t' .. table.concat(labels, '\t') end

-- A labelled timer has finished: its labels leave the index when its
-- record expires (px ms from now).
local labels_trim -- below
local function labels_final(tkey, id, now, px)
  local v = redis.call('GET', tkey)
  if v then
    redis.call('ZADD', key_base(tkey) .. 'lx', tonumber(now) + tonumber(px), lx_member(id, labels_of(v)))
  end
  labels_trim(key_base(tkey), tonumber(now), 2) -- two expired for each one added: trimming keeps pace
end

-- A labelled timer runs again (a dead letter retried or replayed): its
-- labels stay indexed.
local function labels_unfinal(tkey, id, v)
  redis.call('ZREM', key_base(tkey) .. 'lx', lx_member(id, labels_of(v)))
end

-- A labelled timer is deleted now (a dead letter purged).
local function labels_drop(tkey, id, v)
  local labels = labels_of(v)
  labels_index(tkey, id, labels, 'ZREM')
  redis.call('ZREM', key_base(tkey) .. 'lx', lx_member(id, labels))
end

-- Drops from the index up to `max` labelled timers of the partition whose
-- records have expired. A record that is there again is looked at: an id
-- created anew after the expiry keeps only the entries of its own labels,
-- and a record that still expires (as a clock step can make it, or the few
-- ms between the finish's now and Redis's clock) is looked at again when it
-- will have expired: also one with less than 1 ms left (PTTL 0; a script
-- sees a key until its expiry passes the script's start, while PTTL counts
-- from the clock: dropped then, its entries would stay for ever).
labels_trim = function(base, now, max)
  local lx = base .. 'lx'
  local due = redis.call('ZRANGEBYSCORE', lx, '-inf', now, 'LIMIT', 0, max)
  for _, m in ipairs(due) do
    local parts = {}
    for f in string.gmatch(m, '[^\t]+') do parts[#parts + 1] = f end
    local id = table.remove(parts, 1)
    local tk = base .. 't:' .. id
    redis.call('ZREM', lx, m)
    local r, v = rec_get(tk)
    local own = {}
    if r and r.lb == 1 then
      for _, l in ipairs(labels_of(v)) do own[l] = true end
    end
    local gone = {}
    for _, l in ipairs(parts) do
      if not own[l] then gone[#gone + 1] = l end
    end
    if #gone > 0 then labels_index(tk, id, gone, 'ZREM') end
    if r and #gone == 0 then
      local ttl = redis.call('PTTL', tk)
      if ttl >= 0 then redis.call('ZADD', lx, now + math.max(ttl, 1), m) end -- the same labels, still expiring
    end
  end
end

-- The timer r runs again (retry of a dead letter): it no longer expires. A
-- history its record holds goes back to its key (r.hist is set: the caller
-- puts r's head after this).
local function keep_forever(tkey, r)
  local v = redis.call('GET', tkey)
  if not v then return end
  local body, h = rec_split(v)
  if head_decode(v).lb == 1 then
    labels_unfinal(tkey, string.sub(tkey, #key_base(tkey) + 3), body)
  end
  if h then -- both written without an expiry
    redis.call('SET', tkey, body)
    redis.call('SET', hist_key(tkey), h)
    r.hist = 1
  else
    redis.call('PERSIST', tkey)
    redis.call('PERSIST', hist_key(tkey)) -- (a no-op when there is no history)
  end
end

-- Attempt a, then the history of r, at most `keep` attempts in all.
local function hist_join(tkey, r, a, keep)
  local n, pos = 1, 0
  keep = tonumber(keep)
  local h = r.hist == 1 and keep > 1 and redis.call('GET', hist_key(tkey)) or false
  if h and h ~= '' then
    while true do
      local t = string.find(h, '\t', pos + 1, true)
      if not t then break end
      n = n + 1
      if n >= keep then
        h = string.sub(h, 1, t - 1)
        break
      end
      pos = t
    end
    a = a .. '\t' .. h
  end
  return a
end

-- Puts attempt a first in the history key of r, keeping at most `keep`
-- attempts; px: the timer has finished, its history expires after px ms.
local function hist_add(tkey, r, a, keep, px)
  local h, hk = hist_join(tkey, r, a, keep), hist_key(tkey)
  r.hist = 1
  if px then redis.call('SET', hk, h, 'PX', px) else redis.call('SET', hk, h, 'KEEPTTL') end
end

-- The newest attempt of the history ('' when none), from its key or the
-- record (of this layout).
local function hist_last(tkey)
  local h = redis.call('GET', hist_key(tkey))
  if not h then
    local v = redis.call('GET', tkey)
    if v then
      local _, held = rec_split(v)
      h = held
    end
    if not h then return '' end
  end
  local t = string.find(h, '\t', 1, true)
  return t and string.sub(h, 1, t - 1) or h
end

-- What a run resets: the reservations and instructions that arrived during
-- it (the version stays: it moves only on instructions).
local function run_clear(r) r.rsv, r.flag, r.next = 0, 0, 0 end

-- A calendar schedule (every < 0) paused in the middle of a run (between
-- its attempts, or during one) takes up that run's slot when resumed, not
-- the instant its retry was due: the slot is what its misfire policy
-- judges (control_one's resume). Called before the pause sets att to 0.
local function pause_at_slot(r, every)
  if every < 0 and r.att > 0 and r.plan > 0 then r.fire = r.plan end
end

-- A retry or replay of a dead letter is the run it failed in, again: begin
-- counts a run at its first attempt, so the count steps back one here and
-- the replayed attempts carry that run's number (and message identity).
local function replay_run(r) if r.runs > 0 then r.runs = r.runs - 1 end end

-- Where a timer is found. A timer some instance holds (owner set: waiting
-- in its wheel, or firing) is in that instance's claimed zset,
-- hw:{P}:cl:<tag>, by due time, and nowhere else. Any other is in the
-- listing index of its namespace and state, hw:{P}:ix:<namespace>:<state>,
-- member its key id: by due time while waiting (these are what sweeps
-- claim, so the index is the due set too), by the time it got there
-- otherwise (paused and finished states, listed newest first). So a pending
-- timer costs one zset entry, and a listing of a waiting state merges the
-- index with the claimed zsets (list.lua). Two registries let a function
-- find those zsets within the partition: hw:{P}:nss, the namespaces that
-- have waiting timers in an index (for sweeps), and hw:{P}:holders, the
-- tags of instances that have a claimed zset (for listings). Every change of
-- state or owner goes through unplace and place.
local function ix_key(tkey, id, state)
  return key_base(tkey) .. 'ix:' .. id_ns(id) .. ':' .. state
end

local function claimed_key(tkey, owner) return key_base(tkey) .. 'cl:' .. owner end

-- The revocations of an instance: a list hw:{P}:rv:<tag> of "<version> <id>"
-- of the timers it held waiting (in its wheel or limiter) that an
-- instruction took away (cancel, fire, reschedule, pause). Its next claim in
-- the partition hands them over and empties the list (claim.lua), so the
-- instance drops those jobs then, rather than holding them until a begin is
-- refused (a job in a paused queue would wait for ever). The release of an
-- instance deletes its list. Call before the instruction changes r.
local function revoked_key(tkey, owner) return key_base(tkey) .. 'rv:' .. owner end
local function revoke(tkey, id, r)
  if r.owner ~= NO_OWNER and is_waiting(r.st) then
    redis.call('RPUSH', revoked_key(tkey, r.owner), r.ver .. ' ' .. id)
  end
end

local function place_key(tkey, id, r)
  if r.owner ~= NO_OWNER then return claimed_key(tkey, r.owner) end
  return ix_key(tkey, id, r.st)
end

-- ---- the writes of a batch ----
-- A function that moves many timers in one call (claim, finish) runs its
-- loop through batched(): the zset entries, registry members and counts
-- its timers move are gathered and written at its end with one command per
-- key, rather than one per timer (a call from Lua costs about as much as
-- the write itself). Nothing in such a call reads them back before the
-- end; removals are written before additions, so a timer taken out of a
-- zset and put back in the same call (a retry held again) ends up there.
-- The gathered writes are made also when the loop raises an error, so the
-- heads it already wrote never lose their zset entries. The library's state
-- outlives a call, so every function starts with batch_reset()
-- (persistence/store.c): a call stopped inside batched() (FUNCTION KILL)
-- leaves nothing gathered for the next one. read_only: the call is a
-- no-writes twin (READ_ONLY above).
local BATCH = nil
local BUDGET_END = nil -- (budget_start below)
local function batch_reset(read_only)
  BATCH = nil
  BUDGET_END = nil
  LB_SEEN = {}
  READ_ONLY = read_only
  if read_only then RO_HIST = {} end -- (written by read-only calls only: no table made per hot call)
end
local function batch_flush()
  local b = BATCH
  BATCH = nil
  local function each(t, cmd, k)
    for _, key in ipairs(t.keys) do
      local a = t[key]
      for i = 1, #a, k do redis.call(cmd, key, unpack(a, i, math.min(i + k - 1, #a))) end
    end
  end
  for i = 1, #b.mset, 512 do redis.call('MSET', unpack(b.mset, i, math.min(i + 511, #b.mset))) end
  each(b.zrem, 'ZREM', 512)
  each(b.zadd, 'ZADD', 1024) -- (score, member pairs)
  each(b.sadd, 'SADD', 512)
  for _, key in ipairs(b.hincr.keys) do
    local h = b.hincr[key]
    for _, f in ipairs(h.fields) do
      local d = h.d[f]
      if d ~= 0 and redis.call('HINCRBY', key, f, d) == 0 then redis.call('HDEL', key, f) end
    end
  end
end
local function batched(loop)
  local function list() return {keys = {}} end
  BATCH = {mset = {}, zrem = list(), zadd = list(), sadd = list(), hincr = list()}
  local ok, err = pcall(loop)
  batch_flush()
  if not ok then error(err, 0) end
end
-- ---- a call's time budget ----
-- A call that moves many timers (claim, begin, finish) stops taking more
-- once it has run for its budget (microseconds, from the caller; 0: none),
-- looked at before every BUDGET_EVERY-th timer, and answers for the timers
-- it took: the caller sends the rest in another call (persistence/timers.c).
-- So a call holds Redis about as long on a slow or busy machine as on a
-- fast one, rather than as long as its count of timers takes there. It
-- always takes its first BUDGET_EVERY timers.
local BUDGET_EVERY = 4
local function clock_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- (n: the call's timers; a call of at most BUDGET_EVERY never looks)
local function budget_start(us, n)
  us = tonumber(us) or 0
  BUDGET_END = us > 0 and n > BUDGET_EVERY and clock_us() + us or nil
end
-- Whether the call stops before its i-th timer.
local function budget_spent(i)
  return BUDGET_END ~= nil and i % BUDGET_EVERY == 1 and i > 1 and clock_us() >= BUDGET_END
end
-- The list of key in t (a batch's gathered writes), made when first asked for.
local function batch_list(t, key)
  local a = t[key]
  if not a then
    a = {}
    t[key] = a
    t.keys[#t.keys + 1] = key
  end
  return a
end
-- Writes a new record (a key no record is at: the caller checked).
local function rec_new(key, v)
  if not BATCH then return redis.call('SET', key, v) end
  local a = BATCH.mset
  a[#a + 1] = key
  a[#a + 1] = v
end
local function zs_rem(key, id)
  if not BATCH then return redis.call('ZREM', key, id) end
  local a = batch_list(BATCH.zrem, key)
  a[#a + 1] = id
end
local function zs_add(key, score, id)
  if not BATCH then return redis.call('ZADD', key, score, id) end
  local a = batch_list(BATCH.zadd, key)
  a[#a + 1] = score
  a[#a + 1] = id
end
local function set_add(key, m)
  if not BATCH then return redis.call('SADD', key, m) end
  local a = batch_list(BATCH.sadd, key)
  local seen = a.seen -- (a table per key: no string made per member to ask)
  if not seen then
    seen = {}
    a.seen = seen
  end
  if seen[m] then return end
  seen[m] = true
  a[#a + 1] = m
end
local DELTA = {[1] = '1', [-1] = '-1'} -- (the usual increments, as strings)
local function hash_incr(key, f, d)
  if not BATCH then
    if redis.call('HINCRBY', key, f, DELTA[d] or d) == 0 then redis.call('HDEL', key, f) end
    return
  end
  local h = batch_list(BATCH.hincr, key)
  if not h.d then h.fields, h.d = {}, {} end
  if not h.d[f] then
    h.d[f] = 0
    h.fields[#h.fields + 1] = f
  end
  h.d[f] = h.d[f] + d
end

-- Takes the timer out of where it is found; call before changing its state
-- or owner.
local function unplace(tkey, id, r)
  zs_rem(place_key(tkey, id, r), id)
end

-- Puts the timer where its state and owner say, at score (its due time
-- while it waits, else now).
local function place(tkey, id, r, score)
  zs_add(place_key(tkey, id, r), score, id)
  if r.owner ~= NO_OWNER then
    set_add(key_base(tkey) .. 'holders', r.owner)
  elseif is_waiting(r.st) then
    set_add(key_base(tkey) .. 'nss', id_ns(id))
  end
end

-- Places a waiting timer (state already set) where its next attempt is
-- found: held by this instance (owner tag) when it is due within the
-- horizon (the caller then holds it in its wheel), else in its index for any
-- instance's sweep. Returns 1 when this instance holds it.
local function hold_or_index(tkey, id, r, horizon, owner)
  local held = r.fire <= tonumber(horizon)
  r.owner = held and owner or NO_OWNER
  place(tkey, id, r, r.fire)
  return held and 1 or 0
end

-- The state a listing of waiting timers shows a timer under: a timer in its
-- attempt (firing) under the one it waited in, scheduled for a first attempt,
-- retrying for a later one.
local function waiting_state(r)
  if r.st == 'firing' then return r.att <= 1 and 'scheduled' or 'retrying' end
  return r.st
end

-- Drops index entries of finished timers whose records have expired: on
-- one finish in 64 (by the clock), which is often enough for an index that
-- only a listing reads (it skips and drops expired entries itself).
local function ix_trim(tkey, id, state, now, retention)
  if tonumber(now) % 64 ~= 0 then return end
  redis.call('ZREMRANGEBYSCORE', ix_key(tkey, id, state), '-inf', tonumber(now) - tonumber(retention))
end

-- A finished timer: out of its place, into the final state's index, its
-- retention countdown started (hist_set: as hist_add's px did for the
-- history; inline: {body = the record after its head, without a history,
-- hist = its history}: the record is written whole with its history at
-- its end, and its history key is deleted).
local function skipped_key(tkey) return key_base(tkey) .. 'sk' end
-- A schedule that ends: its count of skipped slots goes with it (the hash
-- field would outlive the record, which expires).
local function skipped_drop(tkey, id, r)
  if r.sk == 1 then
    redis.call('HDEL', skipped_key(tkey), id)
    r.sk = 0
  end
end

local function to_final(tkey, id, r, state, now, retention, hist_set, inline)
  skipped_drop(tkey, id, r)
  unplace(tkey, id, r)
  r.st, r.owner = state, NO_OWNER
  run_clear(r)
  place(tkey, id, r, now)
  ix_trim(tkey, id, state, now, retention)
  if inline then
    if r.hist == 1 then redis.call('DEL', hist_key(tkey)) end
    r.hist = 0
    redis.call('SET', tkey, head_encode(r) .. inline.body .. '\0' .. inline.hist, 'PX', retention)
  else
    head_put(tkey, r)
    expire_after(tkey, r, retention, hist_set)
  end
  if r.lb == 1 then labels_final(tkey, id, now, retention) end
end

-- ---- counts per namespace, queue and state ----
-- hw:{P}:cn, a hash: field "<namespace>/<state code><queue>" -> how many of
-- the partition's timers of that namespace and queue are in that state
-- (GET /queues, persistence/queues.h). Only the states a timer leaves
-- through a function are counted: scheduled, retrying, paused; a timer in
-- its attempt (firing) is counted where a listing shows it, under the state
-- it waited in (count_bucket), so a begin changes no count. A
-- finished timer leaves by the expiry of its record, which no function
-- sees, so finished states are not counted. A field that falls to 0 is
-- deleted, so the hash holds only the queues that have timers.
-- Bit 5 of the head (r.cnt) says the timer is in the counts. A timer written
-- before counts existed is not: it is added at its first change of state,
-- or by the rebuild (counts.lua), whichever comes first, and never twice.
-- Every change of state goes through count_step, before the head is put.
local COUNTED = {scheduled = true, retrying = true, paused = true}
-- Where a timer in state st with att attempts in its run is counted.
local function count_bucket(st, att)
  if st == 'firing' then return att <= 1 and 'scheduled' or 'retrying' end
  return st
end
local function counts_key(tkey) return key_base(tkey) .. 'cn' end
local function count_add(tkey, id, queue, st, d)
  if not COUNTED[st] then return end
  hash_incr(counts_key(tkey), id_ns(id) .. '/' .. STATE_CODE[st] .. queue, d)
end

-- The timer r (its queue: tail_decode's) goes from count_bucket `from` to `to`.
local function count_step(tkey, id, queue, r, from, to)
  if r.cnt == 1 then
    if from == to then return end
    count_add(tkey, id, queue, from, -1)
  end
  r.cnt = 1
  count_add(tkey, id, queue, to, 1)
end

-- The key id of a timer key (the part after "t:").
local function key_id(tkey) return string.sub(tkey, #key_base(tkey) + 3) end

-- ---- the layout before this one ----
-- Nine lines: state, fire_ms, attempts, "created_ms[ request_id]", owner
-- (an instance id), when ("delay_ms=N" | "fire_at_ms=N"), the history, the
-- run line "version runs reserved flag planned next token", the spec; held
-- timers sat in hw:{P}:claimed:<instance>. An upgraded timer keeps its
-- state, times and history; one an instance of the older build held is
-- handed back as that build's release would (the README says to stop those
-- instances first, so normally none is).
-- The record of this layout the older one v (at tkey) becomes, its
-- decoded head, its history ('' none) and the instance of the older build
-- that held it ('' none); nothing is written.
upgraded = function(tkey, v)
  local f, pos = {}, 1
  for i = 1, 8 do
    local nl = string.find(v, '\n', pos, true)
    if not nl then error('hookwheel: unreadable timer record ' .. tkey) end
    f[i] = string.sub(v, pos, nl - 1)
    pos = nl + 1
  end
  local spec = string.sub(v, pos)
  local run = {0, 0, 0, 0, 0, 0, 0}
  local i = 1
  for n in string.gmatch(f[8], '%d+') do run[i] = tonumber(n); i = i + 1 end
  local created, rid = string.match(f[4], '^(%d+) ?(.*)$')
  local kind, when = string.sub(f[6], 1, 6) == 'delay_' and 'd' or 'f', string.match(f[6], '=(%-?%d+)$')
  local ok, s = pcall(cjson.decode, spec)
  if not ok then s = {} end
  local queue = type(s.queue) == 'string' and s.queue or ''
  local every = type(s['repeat']) == 'table' and tonumber(s['repeat'].every_ms) or 0
  local r = {st = f[1], att = tonumber(f[3]) or 0, fire = tonumber(f[2]) or 0, owner = NO_OWNER,
             ver = run[1], runs = run[2], rsv = run[3], flag = run[4], plan = run[5], next = run[6],
             tok = run[7] % 4294967296, hist = f[7] ~= '' and 1 or 0}
  if f[5] ~= '' and r.st == 'firing' then r.st, r.fire = 'retrying', tonumber(redis.call('TIME')[1]) * 1000 end
  local tail = struct.pack('<i6B', tonumber(created) or 0, #rid) .. rid ..
               struct.pack('<Bi6i6B', string.byte(kind),
                           tonumber(when) or 0, every, #queue) .. queue .. spec
  return r, head_encode(r) .. tail, f[7], f[5]
end

upgrade = function(tkey)
  local r, v, hist, old_owner = upgraded(tkey, redis.call('GET', tkey))
  local id = string.sub(tkey, #key_base(tkey) + 3)
  if old_owner ~= '' then redis.call('ZREM', key_base(tkey) .. 'claimed:' .. old_owner, id) end
  redis.call('SET', tkey, v, 'KEEPTTL')
  if hist ~= '' then
    local ttl = redis.call('PTTL', tkey)
    if ttl > 0 then redis.call('SET', hist_key(tkey), hist, 'PX', ttl)
    else redis.call('SET', hist_key(tkey), hist) end
  end
  if old_owner ~= '' and is_waiting(r.st) then place(tkey, id, r, r.fire) end
end

-- ---- instructions to one timer (cancel.lua, control.lua, select.lua) ----

-- Exact cancel of the timer r (record v) at tkey. A timer that can still
-- start an attempt (scheduled, retrying, paused) becomes cancelled and
-- leaves every index; one that began an attempt or finished is left as it
-- is, except a recurring timer in a run: the run completes and no other
-- follows (the flag is read by finish). Returns 1 cancelled (now or
-- before), 2 cancelled once its current run ends, 0 too late; and 1 when
-- this call cancelled it.
local function cancel_one(tkey, id, r, v, now, retention)
  if r.st == 'cancelled' then return 1, 0 end
  if r.st == 'firing' and tail_decode(v).every ~= 0 then -- recurring (every < 0: a calendar schedule)
    r.flag = 2
    r.rsv, r.next = 0, 0
    head_put(tkey, r)
    return 2, 0
  end
  if not is_waiting(r.st) and r.st ~= 'paused' then return 0, 0 end
  revoke(tkey, id, r)
  count_step(tkey, id, tail_decode(v).queue, r, r.st, 'cancelled')
  to_final(tkey, id, r, 'cancelled', now, retention)
  return 1, 1
end

-- fire, reschedule, pause, resume or retry of the timer r (record v) at
-- tkey (the Circulation Trigger rules; DESIGN section 5). Every one of them
-- is an instruction that replaces the ones before it:
--   fire        the next run is now; during a run, it is reserved and starts
--               right after that run (never alongside it)
--   reschedule  the next run is at fire; during a run, after that run
--   pause       the waiting run is dropped; during a run, no run follows it
--   resume      a paused timer waits again: a recurring one every_ms from
--               now, a one-shot at its due time (now if that passed)
--   retry       a failed timer (a dead letter) runs again now: a new series
--               of attempts under the same id, its history kept, no longer
--               expiring
-- Each bumps the version, so a run some instance holds under an older
-- version never starts (begin checks it). A one-shot timer in its attempt
-- cannot take fire, reschedule or pause (it runs once); finished timers
-- take nothing. What is due by horizon (-1: never) is claimed by owner at
-- once. Returns 1 done (and 1 when owner now holds the run in its claims),
-- 2 done during a run (for after it), or 0 not possible in this state.
local function control_one(tkey, id, r, v, op, now, fire, horizon, owner)
  local st = r.st
  local function done(held)
    head_put(tkey, r)
    return 1, held
  end
  local function count_to(to) count_step(tkey, id, tail_decode(v).queue, r, r.st, to) end
  local function wait_at(at)
    revoke(tkey, id, r)
    unplace(tkey, id, r)
    count_to('scheduled')
    r.ver = r.ver + 1
    run_clear(r)
    r.att, r.fire, r.st = 0, at, 'scheduled'
    return done(hold_or_index(tkey, id, r, horizon, owner))
  end
  if op == 'retry' then
    if st ~= 'failed' then return 0, 0 end
    keep_forever(tkey, r)
    replay_run(r)
    return wait_at(now)
  end
  if is_final(st) then return 0, 0 end
  local every = tail_decode(v).every
  if st == 'firing' then
    if every == 0 then return op == 'resume' and 1 or 0, 0 end -- resume: not paused, nothing changes
    r.ver = r.ver + 1
    if op == 'fire' then
      r.rsv, r.flag, r.next = 1, 0, 0
    elseif op == 'reschedule' then
      -- (r.next 0 is "no reschedule": a reschedule to the epoch's first
      -- millisecond is, like any past instant, as soon as the run ends)
      r.rsv, r.flag, r.next = 0, 0, math.max(fire, 1)
    elseif op == 'pause' then
      r.flag = 1
    elseif r.flag == 1 then -- resume, after a pause during this run
      r.flag = 0
    end
    head_put(tkey, r)
    return 2, 0
  end
  -- waiting (scheduled, retrying) or paused
  if op == 'fire' then return wait_at(now) end
  if op == 'reschedule' then return wait_at(fire) end
  if op == 'pause' then
    if st == 'paused' then return 1, 0 end
    revoke(tkey, id, r)
    unplace(tkey, id, r)
    r.ver = r.ver + 1
    r.rsv, r.next = 0, 0
    count_to('paused')
    pause_at_slot(r, every)
    r.st, r.owner, r.att = 'paused', NO_OWNER, 0
    place(tkey, id, r, now)
    return done(0)
  end
  if st ~= 'paused' then return 1, 0 end -- resume of a timer that is not paused
  if every > 0 then return wait_at(now + every) end
  -- a calendar schedule (every < 0) resumes at the slot it was paused at, even
  -- past: the engine applies its misfire policy to a slot that was missed
  if every < 0 then return wait_at(r.fire) end
  return wait_at(math.max(r.fire, now))
end

-- ---- callbacks ----
-- A timer with on_success / on_failure (bit 7 of its head) that ends
-- delivered / failed makes, in the same call, a one-shot timer of its own
-- partition and namespace due now: "<id>#on_success.<version>" (or
-- on_failure; keys_partition stops at '#'), which POSTs a JSON report of
-- the outcome to that URL with the parent's retry policy, timeout and
-- queue (not its headers), under the parent's request id and trace
-- context. It is as durable as the outcome, and is claimed by the next
-- sweep of any instance. It has no callbacks of its own.
local function callback_create(tkey, id, r, final, now, attempt)
  local v = rec_split(redis.call('GET', tkey))
  local t = tail_decode(v)
  local ok, spec = pcall(cjson.decode, string.sub(v, t.spec_from))
  if not ok or type(spec) ~= 'table' then return end
  local event = final == 'delivered' and 'on_success' or 'on_failure'
  local url = spec[event]
  if type(url) ~= 'string' then return end
  -- A callback of this id and version may exist already: this timer's own
  -- (nothing to do), or an earlier timer's of the same id, whose record was
  -- purged or expired before its callback's: its report names another
  -- created_at_ms. A finished one is dropped (as its expiry would); one
  -- still to be sent stays, and this timer's version steps past it, so that
  -- neither report is lost.
  local own = ',"created_at_ms":' .. t.created .. ','
  local cid, ckey, free
  for _ = 1, 16 do
    cid = id .. '#' .. event .. '.' .. r.ver
    ckey = key_base(tkey) .. 't:' .. cid
    local cr, cv = rec_get(ckey)
    free = not cr
    if cr and string.find(cv, own, 1, true) then return end
    if cr and is_final(cr.st) then
      redis.call('DEL', ckey, hist_key(ckey))
      free = true
    end
    if free then break end
    r.ver = r.ver + 1
    head_put(tkey, r)
  end
  if not free then return end
  local slash = string.find(id, '/', 1, true)
  local report = '{"event":"timer.' .. final .. '","id":' .. cjson.encode(slash and string.sub(id, slash + 1) or id) ..
                 ',"state":"' .. final .. '","runs":' .. r.runs .. ',"attempts":' .. r.att ..
                 ',"created_at_ms":' .. t.created .. ',"finished_at_ms":' .. now ..
                 ',"last_attempt":' .. (attempt ~= '' and attempt or 'null') .. '}'
  local cs = '{"json":' .. report
  if type(spec.retry) == 'table' then cs = cs .. ',"retry":' .. cjson.encode(spec.retry) end
  if spec.timeout_ms then cs = cs .. ',"timeout_ms":' .. string.format('%d', spec.timeout_ms) end
  if type(spec.queue) == 'string' then cs = cs .. ',"queue":' .. cjson.encode(spec.queue) end
  cs = cs .. ',"url":' .. cjson.encode(url) .. '}'
  local q = t.queue == 'default' and '' or t.queue
  local c = head_decode(struct.pack(HEAD_FMT, MAGIC, string.byte('s'), 0, now, NO_OWNER, 0, 0, 0, 0, 0, 0))
  count_step(ckey, cid, t.queue, c, 'scheduled', 'scheduled') -- (sets c.cnt)
  redis.call('SET', ckey, head_encode(c) .. struct.pack('<i6B', now, #t.rid) .. t.rid ..
             struct.pack('<Bi6i6B', string.byte('d'), 0, 0, #q) .. q .. cs)
  place(ckey, cid, c, now)
end

-- ---- an attempt this instance no longer runs (release.lua, handback.lua) ----

-- The attempt of the firing timer r (the record, or the prefix rec_peek
-- read, is v) at tkey was interrupted: it counts, and the timer is retried
-- at once, never before the attempt's due time (an instance begins an
-- attempt up to its begin lead ahead of it), unless a pause or cancel
-- arrived during that run (then it is paused or cancelled). The attempt
-- (JSON) is recorded as the history's newest, keeping `keep` of them; a
-- cancelled timer's record expires after retention. The caller has taken
-- the timer out of its claimed zset, or deletes that zset.
local function hand_back_firing(tkey, id, r, v, now, attempt, retention, keep)
  local from = count_bucket('firing', r.att)
  r.owner = NO_OWNER
  hist_add(tkey, r, attempt, keep, nil)
  if r.flag == 0 then
    r.fire, r.st = math.max(now, r.fire), 'retrying'
  else
    if r.flag == 1 then pause_at_slot(r, tail_decode(v).every) end
    r.st, r.att = r.flag == 1 and 'paused' or 'cancelled', 0
    run_clear(r)
    if r.st == 'cancelled' then skipped_drop(tkey, id, r) end
  end
  count_step(tkey, id, tail_decode(v).queue, r, from, r.st)
  place(tkey, id, r, r.st == 'retrying' and r.fire or now)
  head_put(tkey, r)
  if r.st == 'cancelled' then
    expire_after(tkey, r, retention, false)
    if r.lb == 1 then labels_final(tkey, id, now, retention) end
  end
end
