-- A timer is one string key hw:{P}:t:<id> holding eight lines:
--   state, fire_ms, attempts, created_ms, owner, when, last, spec
-- (last and spec are compact JSON, so they hold no raw newline). One string
-- costs far less Redis memory than a hash of the same fields, whose spec
-- value is too long for the compact listpack encoding. This prelude is put
-- in front of every script.
local ST, FIRE, ATT, CREATED, OWNER, WHEN, LAST, SPEC = 1, 2, 3, 4, 5, 6, 7, 8

local function rec_parse(v)
  local r, pos = {}, 1
  for i = 1, 7 do
    local nl = string.find(v, '\n', pos, true)
    if not nl then return nil end
    r[i] = string.sub(v, pos, nl - 1)
    pos = nl + 1
  end
  r[SPEC] = string.sub(v, pos)
  return r
end

local function rec_load(key)
  local v = redis.call('GET', key)
  if not v then return nil, nil end
  return rec_parse(v), v
end

-- KEEPTTL: a finished timer keeps its retention countdown.
local function rec_save(key, r)
  redis.call('SET', key, table.concat(r, '\n'), 'KEEPTTL')
end
