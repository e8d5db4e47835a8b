#!lua
-- heartbeat: renew this worker's membership, expire silent members, report the fleet.
-- KEYS: none (every key is P .. suffix, all in one {crawl} hash slot)
--   P..'members'     ZSET  worker -> last heartbeat, server ms          (join, heartbeat)
--   P..'applied'     HASH  worker -> epoch whose handoffs it has done   (join, heartbeat)
--   P..'epoch'       STRING membership epoch, +1 on every change        (join, leave, expiry)
--   P..'rings'       HASH  epoch -> its members (JSON), written with each change; pruned
--     here below the settled epoch: what a new owner needs to know who may still fetch
--   P..'orphans'     SET   streams of departed workers, to be drained   (leave, expiry)
--   P..'inbox'       STREAM submissions made while no worker was alive  (commit)
--   P..'parked', P..'park:'..host  read when recounting
--   P..'idle_since'  STRING server ms since which nothing was outstanding
--   P..'seenmeta'    HASH  'outstanding': entries waiting or held, fleet-wide (commit);
--     recounted here. 'queued': entries ever added; a crawl that never had one has not
--     begun, so it is not idle (workers started before the first submit wait)
--   P..'stats'       HASH  fleet counters (leases_reclaimed here)
--   P..'w:'..worker  HASH  the worker's own counters, replaced wholesale
--   P..'instance'    STRING the crawl's marker: checked against the worker's
--   P..'departed'    ZSET  workers whose streams were released -> when; pruned here after
--     forget_ms: their counters folded into P..'retired' HASH, then P..'w:'..id deleted
--     and the id removed from P..'workers' SET
-- ARGV: P, worker, lease_ms, applied_epoch, known_epoch, now_ms ('' for the server's TIME;
--   simulations drive time through it), expire_ms (members silent this long expire: the
--   lease; 0 only for the simulations' deliberate bug reclaim_live), the worker's instance
--   marker ('' to skip the check), forget_ms, then field/value pairs of stats
--   P..'settings'    HASH  read: its 'version', for workers to learn of a change
-- Returns {status, now_ms, epoch, settled_epoch, idle_since, orphans, settings version
--   ('' if none; '?' if it is longer than 20 characters), release (while some member has
--   not applied the newest epoch, JSON {behind: {member: epoch}, rings: {epoch: [members]}};
--   else ''), members...}
--   status 'ok'; 'lost' when the crawl's marker is not the worker's (its state is gone:
--   checked first); 'gone' when this worker is no longer (or no longer may be) a member.
local P, worker = ARGV[1], ARGV[2]
local lease, applied, known = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = tonumber(ARGV[6])
local expire_after = tonumber(ARGV[7])
local marker, forget_after = ARGV[8], tonumber(ARGV[9])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if marker ~= '' and redis.call('GET', P .. 'instance') ~= marker then
  return {'lost', now}
end

local function expire(w)
  redis.call('ZREM', P .. 'members', w)
  redis.call('HDEL', P .. 'applied', w)
  local e = redis.call('INCR', P .. 'epoch')
  redis.call('HSET', P .. 'rings', e, cjson.encode(redis.call('ZRANGE', P .. 'members', 0, -1)))
  local stream = P .. 'q:' .. w
  if redis.call('EXISTS', stream) == 1 then
    local held = redis.call('XPENDING', stream, 'g')[1]
    redis.call('HINCRBY', P .. 'stats', 'leases_reclaimed', held)
    redis.call('SADD', P .. 'orphans', stream)
  end
end

local last = redis.call('ZSCORE', P .. 'members', worker)
if not last then
  return {'gone', now}
end
if now - tonumber(last) > lease then
  expire(worker)
  return {'gone', now}
end
redis.call('ZADD', P .. 'members', now, worker)
-- A worker's applied epoch only grows: a heartbeat sent before a handoff and run after
-- it must not take it back (the rings of the members behind are read by it).
if applied > tonumber(redis.call('HGET', P .. 'applied', worker) or '0') then
  redis.call('HSET', P .. 'applied', worker, applied)
end
if #ARGV > 9 then
  redis.call('HSET', P .. 'w:' .. worker, unpack(ARGV, 10))
end
-- A few departed workers at a time: their own keys go, their counters stay in the totals.
-- Counts are kept; ids, times and gauges (hosts owned, pages a minute) are not.
local KEPT = {pid = true, started = true, hosts = true, inflight_seq = true, per_minute = true}
local gone = redis.call('ZRANGEBYSCORE', P .. 'departed', '-inf', now - forget_after, 'LIMIT', 0, 10)
for _, w in ipairs(gone) do
  local info = redis.call('HGETALL', P .. 'w:' .. w)
  for j = 1, #info, 2 do
    local v = tonumber(info[j + 1])
    if v and v ~= 0 and not KEPT[info[j]] and math.floor(v) == v then
      redis.call('HINCRBY', P .. 'retired', info[j], v)
    end
  end
  redis.call('DEL', P .. 'w:' .. w)
  redis.call('SREM', P .. 'workers', w)
  redis.call('ZREM', P .. 'departed', w)
end
for _, w in ipairs(redis.call('ZRANGEBYSCORE', P .. 'members', '-inf', '(' .. (now - expire_after))) do
  expire(w)
end

local epoch = tonumber(redis.call('GET', P .. 'epoch') or '0')
local members = redis.call('ZRANGE', P .. 'members', 0, -1)
local settled = epoch
local behind = {}  -- member -> the epoch it has applied, for those behind the newest
for i, a in ipairs(redis.call('HMGET', P .. 'applied', unpack(members))) do
  local e = tonumber(a or '0')
  settled = math.min(settled, e)
  if e < epoch then behind[members[i]] = e end
end
-- Who is behind, and the rings they fetch by: a host waits only for those of them that
-- own it in theirs (no ring known: for all of them). Older rings are no longer needed.
local release = ''
if settled < epoch then
  local rings = {}
  for _, e in pairs(behind) do
    local ring = redis.call('HGET', P .. 'rings', e)
    if ring then rings[tostring(e)] = cjson.decode(ring) end
  end
  release = cjson.encode({behind = behind, rings = rings})
end
for _, e in ipairs(redis.call('HKEYS', P .. 'rings')) do
  if tonumber(e) < settled then redis.call('HDEL', P .. 'rings', e) end
end
local orphans = redis.call('SCARD', P .. 'orphans')
if redis.call('XLEN', P .. 'inbox') > 0 then
  orphans = orphans + 1  -- submissions made while nobody was alive wait there
end
local counts = redis.call('HMGET', P .. 'seenmeta', 'outstanding', 'queued')
-- A count that is not a number (written by hand) is 0 here, so the recount below fixes it.
local outstanding = tonumber(counts[1] or '0') or 0
local idle_since = -1
if outstanding <= 0 and orphans == 0 then
  idle_since = tonumber(redis.call('GET', P .. 'idle_since') or '-1')
end
-- A crawl that never queued an entry has not begun: it is not idle, and there is
-- nothing to count (so its heartbeats stay as cheap as an idle crawl's).
local begun = (tonumber(counts[2] or '0') or 0) > 0
if outstanding <= 0 and orphans == 0 and idle_since < 0 and begun then
  -- Before calling the crawl idle, count for real: entries written by hand (or lost
  -- with a Redis that restarted without persistence) must not end a crawl early. Once
  -- idle, it stays idle until a commit adds something, so this count is made once per
  -- idle spell, not on every heartbeat of every member while the fleet waits out --idle.
  local actual = 0
  for _, m in ipairs(members) do actual = actual + redis.call('XLEN', P .. 'q:' .. m) end
  for _, h in ipairs(redis.call('SMEMBERS', P .. 'parked')) do
    actual = actual + redis.call('ZCARD', P .. 'park:' .. h)
  end
  if actual ~= outstanding then
    redis.call('HSET', P .. 'seenmeta', 'outstanding', actual)
    outstanding = actual
  end
  if outstanding <= 0 then
    redis.call('SET', P .. 'idle_since', now)
    idle_since = now
  end
elseif idle_since < 0 then
  redis.call('DEL', P .. 'idle_since')
end
local version = redis.call('HGET', P .. 'settings', 'version') or ''
if #version > 20 then version = '?' end  -- written by hand: no whole number is that long
local reply = {'ok', now, epoch, settled, idle_since, orphans, version, release}
if epoch ~= known then
  for _, m in ipairs(members) do reply[#reply + 1] = m end
end
return reply
