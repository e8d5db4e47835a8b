#!lua
-- leave: take a worker out of the ring at once; its stream becomes an orphan to drain.
-- ARGV: P, worker, then host/pace pairs for P..'pace' (the hosts' pacing, carried over)
-- Returns the new epoch, or 0 when the worker was no longer a member.
local P, worker = ARGV[1], ARGV[2]
if #ARGV > 2 then
  redis.call('HSET', P .. 'pace', unpack(ARGV, 3))
end
if redis.call('ZREM', P .. 'members', worker) == 0 then
  return 0
end
redis.call('HDEL', P .. 'applied', worker)
local stream = P .. 'q:' .. worker
if redis.call('EXISTS', stream) == 1 then
  redis.call('SADD', P .. 'orphans', stream)
end
return redis.call('INCR', P .. 'epoch')
