-- stats: adds one instance's figures of one minute to a namespace's minute
-- hash (persistence/stats.h), whole or not at all, and renews its expiry.
-- KEYS: 1 the minute's hash
-- ARGV: 1 expiry in seconds, then field, increment pairs
-- Returns 1.
for i = 2, #ARGV - 1, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
