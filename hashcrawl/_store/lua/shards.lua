#!lua
-- shards: record a crawl's shard layout once, and only before the crawl has begun, so
-- that two workers starting one crawl at the same moment with different --shards end
-- with one layout, and a worker that joined it as one shard can tell (it reads the key
-- after its join: docs/design.md, "Spreading a crawl over slots").
--   P..'shards'    STRING the tags of shards 1..S-1, space-separated: set here, once
--   P..'instance'  STRING read: a crawl with a marker has begun (on one shard, if no
--                         layout was recorded before it)
-- ARGV[1] = P, ARGV[2] = the tags to record.
-- Returns the recorded tags (these, or those recorded before), or false: the crawl has
-- begun without a layout, on one shard.
local P = ARGV[1]
local recorded = redis.call('GET', P .. 'shards')
if recorded then
  return recorded
end
if redis.call('EXISTS', P .. 'instance') == 1 then
  return false
end
redis.call('SET', P .. 'shards', ARGV[2])
return ARGV[2]
