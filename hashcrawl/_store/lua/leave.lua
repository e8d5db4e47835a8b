#!lua
-- leave: take a worker out of the ring at once; its stream becomes an orphan to drain.
--   P..'members' ZSET: ZREM; P..'applied' HASH: HDEL; P..'orphans' SET: SADD its stream;
--   P..'epoch' STRING: INCR; P..'rings' HASH: HSET of the new epoch's members; P..'pace' HASH: HSET of any host/pace pairs given
-- ARGV: P, worker, then host/pace pairs (the caller writes large sets of them beforehand,
--   in chunks; any given here are unpacked a thousand values at a time).
-- Returns the new epoch, or 0 when the worker was no longer a member.
local P, worker = ARGV[1], ARGV[2]
for s = 3, #ARGV, 1000 do
  redis.call('HSET', P .. 'pace', unpack(ARGV, s, math.min(s + 999, #ARGV)))
end
if redis.call('ZREM', P .. 'members', worker) == 0 then
  return 0
end
redis.call('HDEL', P .. 'applied', worker)
local stream = P .. 'q:' .. worker
if redis.call('EXISTS', stream) == 1 then
  redis.call('SADD', P .. 'orphans', stream)
end
local epoch = redis.call('INCR', P .. 'epoch')
redis.call('HSET', P .. 'rings', epoch, cjson.encode(redis.call('ZRANGE', P .. 'members', 0, -1)))
return epoch
