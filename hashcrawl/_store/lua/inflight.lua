#!lua
-- inflight: record which suspect entries a worker is fetching; a newer record wins.
--   P..'w:'..worker  HASH  'inflight' (comma-joined entry ids), 'inflight_seq'
-- ARGV: P, worker, seq (rises with every record the worker makes), the entry ids
-- Records are written from threads, and one held up (by a timeout, or a paused Redis)
-- can land after a newer one. It must not replace it: a suspect still being fetched
-- would go unnamed, and if it then killed its worker it would cost no attempt.
-- Returns 1 when written, 0 when a newer record was already there.
local key = ARGV[1] .. 'w:' .. ARGV[2]
local seq = tonumber(ARGV[3])
if seq <= tonumber(redis.call('HGET', key, 'inflight_seq') or '0') then
  return 0
end
redis.call('HSET', key, 'inflight', ARGV[4], 'inflight_seq', seq)
return 1
