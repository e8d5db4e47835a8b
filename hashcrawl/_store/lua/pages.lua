#!lua
-- pages: take one page of the crawl's --max-pages-total before it is fetched, if any
-- is left; the count and the check are one step, so the fleet takes at most the cap.
--   P..'stats'  HASH  'pages_taken': pages taken (requests about to leave), fleet-wide
-- ARGV: P, cap (the crawl's --max-pages-total)
-- Returns the pages taken with this one (at most cap), or 0 when none is left.
local key = ARGV[1] .. 'stats'
local taken = tonumber(redis.call('HGET', key, 'pages_taken') or '0')
if taken >= tonumber(ARGV[2]) then
  return 0
end
return redis.call('HINCRBY', key, 'pages_taken', 1)
