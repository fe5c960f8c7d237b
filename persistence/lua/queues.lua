-- queues: the queue controls' writes and the engines' change feed
-- (persistence/queues.h). Every write bumps the version and records the
-- field in the change log in the same step, so a reader that saw version v
-- learns every field written since by reading the log above v.
-- KEYS: 1 the controls hash (field -> value), 2 the version counter, 3 the
--   change log (zset: member field, score the version of its last write),
--   4 the log's floor (the highest version trimmed from the log)
-- ARGV: 1 op
--   put  2 field, 3 value, 4 cap (most fields the hash may hold)
--        -> 1 stored a new field, 0 replaced one, -1 refused: the hash
--           already holds cap fields and this one is new (nothing written)
--   patch 2 field, 3 the defaults' value (what a field not stored, or
--        holding a malformed value, starts from), 4 cap, 5 parallelism,
--        6 paused (0|1), 7 rate, 8 scope ('i' per instance, 'd' deployment):
--        each of 5..8 replaces that member of the stored value, '' keeps it
--        -> {1, value} stored a new field, {0, value} changed one (value: what
--           is stored now); {-1} refused as put is (nothing written)
--   del  2 field -> 1 deleted, 0 there was nothing to delete
--   feed 2 since (a version read before; -1: none)
--        -> {version} nothing changed since;
--           {version, 0, field, value, ...} every field written after
--             `since` (value false: deleted);
--           {version, 1, field, value, ...} the whole hash (`since` is
--             unknown here, too old for the log, or from before a flush)
--   upgrade 2..5 the keys' names before their hash tag, in KEYS order:
--        each is renamed to its KEYS name unless that exists already
--        -> the number renamed (one Redis only: the old names are in other
--           slots, and a Redis Cluster never held them)
local LOG_KEPT = 1024
local function bump(field)
  local v = redis.call('INCR', KEYS[2])
  redis.call('ZADD', KEYS[3], v, field)
  if redis.call('ZCARD', KEYS[3]) > LOG_KEPT then
    local gone = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    redis.call('SET', KEYS[4], gone[2])
    redis.call('ZREMRANGEBYRANK', KEYS[3], 0, 0)
  end
  return v
end
-- A stored value's members {parallelism, paused, rate, scope}, each the
-- text it was written as; nil when the value is malformed (queues.c's
-- parse_value reads such a value as the defaults, so a patch starts there).
local function members(v)
  if not v then
    return nil
  end
  local par, paused, rate, i = string.match(v, '^(%d+) ([01]) (%S+)(.*)$')
  local r = tonumber(rate)
  if not par or tonumber(par) < 1 or not r or r ~= r or r < 0 or r > 100000 or (i ~= '' and i ~= ' i') then
    return nil
  end
  return {par, paused, rate, i == ' i' and 'i' or 'd'}
end
-- Stores value unless the field is new and the hash holds cap fields.
-- -> 1 new, 0 replaced, -1 refused
local function write_capped(field, value, cap)
  local new = redis.call('HEXISTS', KEYS[1], field) == 0
  if new and redis.call('HLEN', KEYS[1]) >= tonumber(cap) then
    return -1
  end
  redis.call('HSET', KEYS[1], field, value)
  bump(field)
  return new and 1 or 0
end
local op = ARGV[1]
if op == 'put' then
  return write_capped(ARGV[2], ARGV[3], ARGV[4])
elseif op == 'patch' then
  local m = members(redis.call('HGET', KEYS[1], ARGV[2])) or members(ARGV[3])
  for k = 1, 4 do
    if ARGV[4 + k] ~= '' then
      m[k] = ARGV[4 + k]
    end
  end
  local value = m[1] .. ' ' .. m[2] .. ' ' .. m[3] .. (m[4] == 'i' and ' i' or '')
  local rc = write_capped(ARGV[2], value, ARGV[4])
  if rc < 0 then
    return {rc}
  end
  return {rc, value}
elseif op == 'del' then
  if redis.call('HDEL', KEYS[1], ARGV[2]) == 0 then
    return 0
  end
  bump(ARGV[2])
  return 1
elseif op == 'feed' then
  local version = tonumber(redis.call('GET', KEYS[2]) or '0')
  local since = tonumber(ARGV[2])
  if since == version then
    return {version}
  end
  local floor = tonumber(redis.call('GET', KEYS[4]) or '0')
  if since < 0 or since > version or since < floor then
    local out = redis.call('HGETALL', KEYS[1])
    table.insert(out, 1, 1)
    table.insert(out, 1, version)
    return out
  end
  local out = {version, 0}
  for _, f in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. since, '+inf')) do
    out[#out + 1] = f
    out[#out + 1] = redis.call('HGET', KEYS[1], f)
  end
  return out
end
if op == 'upgrade' then
  local n = 0
  for i = 1, 4 do
    if redis.call('EXISTS', ARGV[i + 1]) == 1 and redis.call('EXISTS', KEYS[i]) == 0 then
      redis.call('RENAME', ARGV[i + 1], KEYS[i])
      n = n + 1
    end
  end
  return n
end
return redis.error_reply('queues: unknown op')
