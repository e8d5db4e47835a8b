#!lua
-- unpark: bring the first entries of a host's overflow set back into its owner's stream.
--   P..'members' ZSET, P..'epoch' STRING: checked, as in commit (fenced or stale)
--   P..'park:'..host ZSET: ZPOPMIN; P..'parked' SET: loses the host once its set is empty
--   KEYS[1] the owner's stream: XADD
-- ARGV: P, worker, epoch, host, count. Returns {'ok', moved, left} / {'stale'} / {'fenced'}.
local P, worker, host = ARGV[1], ARGV[2], ARGV[4]
if not redis.call('ZSCORE', P .. 'members', worker) then
  return {'fenced'}
end
if tonumber(redis.call('GET', P .. 'epoch') or '0') ~= tonumber(ARGV[3]) then
  return {'stale'}
end
local popped = redis.call('ZPOPMIN', P .. 'park:' .. host, tonumber(ARGV[5]))
for i = 1, #popped, 2 do
  local member = popped[i]
  local payload = string.sub(member, string.find(member, ' ', 1, true) + 1)
  redis.call('XADD', KEYS[1], '*', 'r', payload)
end
local left = redis.call('ZCARD', P .. 'park:' .. host)
if left == 0 then
  redis.call('SREM', P .. 'parked', host)
end
return {'ok', #popped / 2, left}
