#!lua
-- release: forget a departed worker's stream once it has been drained.
--   KEYS[1] the stream; P..'orphans' SET loses it.
-- ARGV: P. Returns 1 when released, 0 when entries are still there.
if redis.call('EXISTS', KEYS[1]) == 1 and redis.call('XLEN', KEYS[1]) > 0 then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('SREM', ARGV[1] .. 'orphans', KEYS[1])
return 1
