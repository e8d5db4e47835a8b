#!lua
-- release: forget a departed worker's stream once it has been drained.
--   KEYS[1] the stream; P..'orphans' SET loses it; P..'departed' ZSET gains its worker
--   (worker -> ms now), whose keys the heartbeat prunes a while later.
-- ARGV: P, now_ms ('' for the server's TIME). Returns 1 when released, 0 when entries
-- are still there.
local P = ARGV[1]
if redis.call('EXISTS', KEYS[1]) == 1 and redis.call('XLEN', KEYS[1]) > 0 then
  return 0
end
local now = tonumber(ARGV[2])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
redis.call('DEL', KEYS[1])
redis.call('SREM', P .. 'orphans', KEYS[1])
local q = P .. 'q:'
if string.sub(KEYS[1], 1, #q) == q then
  redis.call('ZADD', P .. 'departed', now, string.sub(KEYS[1], #q + 1))
end
return 1
