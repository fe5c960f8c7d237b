-- create: store a new timer, or recognise an idempotent repeat.
-- KEYS: 1 timer key
-- ARGV: 1 id, 2 stored spec, 3 fire_ms, 4 now_ms, 5 claim ("1": the caller
--       holds it in its wheel at once), 6 instance id, 7 the due time as the
--       client gave it ("delay_ms=1500"); spec and when together are what
--       idempotency compares, 8 the id of the creating request ('' none)
-- Returns {1} created; {0, record} the same spec exists; {2, state} another
-- spec holds the id.
local r, raw = rec_load(KEYS[1])
if raw then
  if r and r[SPEC] == ARGV[2] and r[WHEN] == ARGV[7] then return {0, raw} end
  return {2, r and r[ST] or ''}
end
local created = ARGV[8] == '' and ARGV[4] or ARGV[4] .. ' ' .. ARGV[8]
local r = {'scheduled', ARGV[3], '0', created, ARGV[5] == '1' and ARGV[6] or '', ARGV[7], '', '', ARGV[2]}
place(KEYS[1], ARGV[1], r, ARGV[3])
rec_save(KEYS[1], r)
return {1}
