-- unlock: delete a lease key only if it still holds this holder's value
-- (compare-and-delete).
-- KEYS: 1 lease key
-- ARGV: 1 holder value
-- Returns 1 deleted, 0 not held by this value.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
