-- renew: extend a lease key while its holder is alive (the watchdog).
-- KEYS: 1 lease key
-- ARGV: 1 holder value, 2 ttl_ms, 3 recreate ("1": set it again if it is gone)
-- Returns 1 renewed, 2 recreated (it was gone: the holder was silent for longer than its
-- ttl, and others may have acted on its absence), 0 lost: the key is gone (without recreate)
-- or held by another value.
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not v and ARGV[3] == '1' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
