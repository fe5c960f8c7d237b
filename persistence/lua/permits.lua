-- permits: deployment-wide queue limits (persistence/queues.h, queues_permits).
-- A queue whose stored controls are shared (the default scope) has a permit
-- hash <controls>:pm:<field>, one field per instance that wants or holds
-- permits: "<held> <rate> <want> <expires_ms>". An instance calls this while
-- it has work in such queues and gets, per queue, how many attempts it may
-- have in flight (grant) and its share of the dispatch rate. The sum of
-- every live instance's held permits never exceeds the queue's parallelism,
-- nor the sum of their rate shares its rate: an instance's held count only
-- grows into what the others do not hold, and only it lowers its own, at its
-- next call, once its attempts in flight allow. An entry expires ttl ms
-- after its instance's last call (a crashed instance's permits come back);
-- an instance that wants nothing more keeps its rate share counted for one
-- interval between starts at that share (1 / share s), held 0.
-- Shares: the parallelism is water-filled over the live instances' wants
-- (each gets what it wants up to an equal share of what is left), and what
-- nobody wants is split equally among the instances that want any, as
-- headroom (so an instance alone may start the queue's next timers without
-- asking again); the rate is split equally among those instances.
-- KEYS: 1 the controls hash (queues.lua's KEYS[1])
-- ARGV: 1 instance, 2 ttl ms, then per queue: field, want, in flight
--   -> per queue: grant (-1: the queue is not shared: per-instance controls),
--      rate share (a string; "0": no rate limit, or none granted)
local me, ttl = ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The hash lives at least ms more (never less than an entry in it needs).
local function keep(key, ms)
  local left = redis.call('PTTL', key)
  if left < ms then
    redis.call('PEXPIRE', key, ms)
  end
end
local out = {}
for i = 3, #ARGV - 2, 3 do
  local field, want, inflight = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local key = KEYS[1] .. ':pm:' .. field
  local v = redis.call('HGET', KEYS[1], field)
  local cap, rate, scope
  if v then
    cap, rate, scope = string.match(v, '^(%d+) [01] (%S+)(.*)$')
  end
  cap, rate = tonumber(cap), tonumber(rate)
  if not cap or not rate or scope == ' i' then
    redis.call('HDEL', key, me)
    out[#out + 1] = -1
    out[#out + 1] = '0'
  else
    if want > cap then
      want = cap
    end
    local others, orate, wants, names = 0, 0, {}, {}
    local h = redis.call('HGETALL', key)
    for j = 1, #h, 2 do
      local inst = h[j]
      if inst ~= me then
        local held, r, w, exp = string.match(h[j + 1], '^(%d+) (%S+) (%d+) (%d+)$')
        if not exp or tonumber(exp) <= now then
          redis.call('HDEL', key, inst)
        else
          others = others + tonumber(held)
          orate = orate + tonumber(r)
          if tonumber(w) > 0 then
            names[#names + 1] = inst
            wants[inst] = math.min(tonumber(w), cap)
          end
        end
      end
    end
    if want == 0 and inflight == 0 then
      -- A rate share goes back only once a start at that share could have
      -- been followed by the next: until then it stays counted (held 0,
      -- wanting nothing), so an instance that takes the rate up at once
      -- cannot start right after this one's last start.
      local prev = redis.call('HGET', key, me)
      local pshare = prev and tonumber(string.match(prev, '^%d+ (%S+) ')) or 0
      if rate > 0 and pshare and pshare > 0 then
        local hold = math.ceil(1000 / pshare)
        redis.call('HSET', key, me, '0 ' .. string.format('%.9g', pshare) .. ' 0 ' .. (now + hold))
        keep(key, hold)
      else
        redis.call('HDEL', key, me)
      end
      out[#out + 1] = 0
      out[#out + 1] = '0'
    else
      names[#names + 1] = me
      wants[me] = want
      table.sort(names, function(a, b)
        return wants[a] < wants[b] or (wants[a] == wants[b] and a < b)
      end)
      local left, target, wanting = cap, 0, 0
      for k, n in ipairs(names) do
        local give = math.min(wants[n], math.floor(left / (#names - k + 1)))
        left = left - give
        if n == me then
          target = give
        end
        if wants[n] > 0 then
          wanting = wanting + 1
        end
      end
      if want > 0 then -- what nobody wants is shared out as headroom for timers still to come due
        target = target + math.floor(left / wanting)
      end
      local held = math.max(0, math.min(cap - others, math.max(target, inflight)))
      local grant = math.min(held, target)
      local share = 0
      if rate > 0 then
        if want > 0 then
          share = math.max(0, math.min(rate / wanting, rate - orate))
        end
        if share <= 0 then
          grant, held = 0, math.min(held, inflight)
        end
      end
      local s = string.format('%.9g', share)
      redis.call('HSET', key, me, held .. ' ' .. s .. ' ' .. want .. ' ' .. (now + ttl))
      keep(key, 2 * ttl)
      out[#out + 1] = grant
      out[#out + 1] = s
    end
  end
end
return out
