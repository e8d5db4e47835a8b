#!lua
-- join: add a worker to the ring, with an empty stream and consumer group of its own.
--   P..'members' ZSET, P..'applied' HASH, P..'epoch' STRING, P..'rings' HASH (epoch ->
--   its members, JSON: HSET), P..'workers' SET (every id
--   that ever joined, for fleet totals), P..'q:'..worker STREAM with group 'g',
--   P..'instance' STRING: the crawl's marker, set by its first join or submit.
-- ARGV: P, worker, now_ms ('' for the server's TIME), the marker the worker knew before
--   ('' at its first join), a new marker to set if the crawl has none, the member it
--   takes the place of ('' for none), that member's last heartbeat as the caller saw
--   it and the lease (ms), the crawl's --timeout (ms), the number N of hosts that member had
--   pages of in hand, those N hosts, then info field/value pairs (host name, machine,
--   pid, started, lease_ms, spider) for P..'w:'..worker
-- Returns {now_ms, epoch, marker}. A new member holds nothing, so it has applied its own
-- epoch. Joining again as a live member (a retry after a lost reply) only renews its
-- heartbeat: entries routed to it meanwhile stay in its stream. An id that was a member
-- once and is no longer gets epoch -1: its stream may be an orphan now, so it must join
-- under a new id. A worker whose marker is gone or replaced gets epoch -2, and nothing is
-- written: the crawl's state was lost under it.
-- Names: a member id is NAME~TOKEN (or a name alone), and the ring goes by names, so no
-- two members may share one. A member of the worker's name other than the one it named,
-- or that one with another heartbeat than it saw (it is running), gets epoch -3, and
-- nothing is written. One behind the newest epoch (it may hold hosts that epoch moved
-- to others, unpaced) and silent for no more than the lease gets -4: look again. The
-- member named, as seen, loses its place to the worker in the
-- same step as a member that expires (out of the ring, its stream an orphan, what it held
-- counted in stats 'leases_reclaimed', and 'taken_over' + 1), and the one epoch that
-- changes both ids moves no host. It wrote no pace records, so the floors it leaves go in
-- P..'floors' HASH for whoever owns its hosts next (``lua/pace.lua`` reads them): '*' ->
-- now (it may have requested any host until now), and each host it had in hand -> now +
-- the timeout (a request of one may still be running at the server). Floors an hour old
-- are pruned then: the delay they pace by is at most half the lease.
local P, worker = ARGV[1], ARGV[2]
local now = tonumber(ARGV[3])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local marker = redis.call('GET', P .. 'instance')
if ARGV[4] ~= '' and marker ~= ARGV[4] then
  return {now, -2, ''}
end
if redis.call('ZSCORE', P .. 'members', worker) then
  redis.call('ZADD', P .. 'members', now, worker)  -- its lease runs from this join, as it thinks
  return {now, tonumber(redis.call('GET', P .. 'epoch') or '0'), marker or ''}
end
if redis.call('SISMEMBER', P .. 'workers', worker) == 1 then
  return {now, -1, ''}
end
local function name_of(id) return (string.match(id, '^[^~]*')) end
local name, replaces, seen, lease = name_of(worker), ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
for _, m in ipairs(redis.call('ZRANGE', P .. 'members', 0, -1)) do
  if name_of(m) == name then
    if m ~= replaces or tonumber(redis.call('ZSCORE', P .. 'members', m)) ~= seen then
      return {now, -3, ''}
    end
    local applied = tonumber(redis.call('HGET', P .. 'applied', m) or '0')
    if applied < tonumber(redis.call('GET', P .. 'epoch') or '0') and now - seen <= lease then
      return {now, -4, ''}
    end
  end
end
if not marker then
  marker = ARGV[5]
  redis.call('SET', P .. 'instance', marker)
end
if replaces ~= '' and name_of(replaces) == name and redis.call('ZREM', P .. 'members', replaces) == 1 then
  redis.call('HDEL', P .. 'applied', replaces)
  local old = P .. 'q:' .. replaces
  if redis.call('EXISTS', old) == 1 then
    redis.call('HINCRBY', P .. 'stats', 'leases_reclaimed', redis.call('XPENDING', old, 'g')[1])
    redis.call('SADD', P .. 'orphans', old)
  end
  redis.call('HINCRBY', P .. 'stats', 'taken_over', 1)
  local floors, late = P .. 'floors', now + tonumber(ARGV[9])
  local kept = redis.call('HGETALL', floors)
  for i = 1, #kept, 2 do
    if tonumber(kept[i + 1]) < now - 3600000 then redis.call('HDEL', floors, kept[i]) end
  end
  redis.call('HSET', floors, '*', math.max(now, tonumber(redis.call('HGET', floors, '*') or '0')))
  for i = 11, 10 + tonumber(ARGV[10]) do
    if tonumber(redis.call('HGET', floors, ARGV[i]) or '0') < late then
      redis.call('HSET', floors, ARGV[i], late)
    end
  end
end
local epoch = redis.call('INCR', P .. 'epoch')
redis.call('ZADD', P .. 'members', now, worker)
redis.call('HSET', P .. 'applied', worker, epoch)
redis.call('HSET', P .. 'rings', epoch, cjson.encode(redis.call('ZRANGE', P .. 'members', 0, -1)))
redis.call('SADD', P .. 'workers', worker)
local stream = P .. 'q:' .. worker
redis.call('DEL', stream)
redis.call('XGROUP', 'CREATE', stream, 'g', '$', 'MKSTREAM')
local info = 11 + tonumber(ARGV[10])
if #ARGV >= info then
  redis.call('HSET', P .. 'w:' .. worker, unpack(ARGV, info))
end
return {now, epoch, marker}
