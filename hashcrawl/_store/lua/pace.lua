#!lua
-- pace: what the next owner of hosts needs to pace them: their pace records and floors.
--   P..'pace' HASH host -> record (commit, leave), P..'floors' HASH (join: '*' -> when a
--   member was last replaced by name, and host -> until when a request it had out may run)
-- ARGV: P, then the hosts
-- Returns, per host, its record (false: none) and then its floor (server ms, 0: none): the
-- later of '*' and the host's own. The replaced member's hosts are not known to Redis, so
-- '*' floors every host read: one that changes hands within a delay of a takeover waits
-- at most that delay more than it needs to.
local P = ARGV[1]
local hosts = {unpack(ARGV, 2)}
local reply = redis.call('HMGET', P .. 'pace', unpack(hosts))
local floors = redis.call('HMGET', P .. 'floors', '*', unpack(hosts))
local all = tonumber(floors[1]) or 0
for i = 1, #hosts do
  reply[#hosts + i] = math.max(all, tonumber(floors[i + 1]) or 0)
end
return reply
