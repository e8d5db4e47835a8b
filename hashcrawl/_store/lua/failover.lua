#!lua
-- failover: the crawl's slot is served by another node than before (a replica promoted,
-- or a reshard). Replication is asynchronous, so the old primary may have issued epochs
-- that died with it; the next membership change here would issue one of those numbers
-- again, with other members, and a worker still holding the old one would pass the
-- fencing check. So the epoch jumps to the server's clock in ms (far above any count of
-- changes), once, before the store that saw the move writes anything else.
--   P..'epoch'  STRING  raised to now (ms) if below it; left alone if the crawl has none
-- ARGV: P, now_ms ('' for the server's TIME). Returns the epoch now, or 0 if none.
local P = ARGV[1]
local epoch = redis.call('GET', P .. 'epoch')
if not epoch then
  return 0
end
local now = tonumber(ARGV[2])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if tonumber(epoch) < now then
  redis.call('SET', P .. 'epoch', now)
  return now
end
return tonumber(epoch)
