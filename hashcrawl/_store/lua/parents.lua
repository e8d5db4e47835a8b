#!lua
-- parents: record start URLs' directories (``--no-parent``'s) in the crawl's scope, at
-- most a cap of them; the count and the check are one step, so no two submits pass it.
--   P..'scope'    SET   SADD of 'dir:HOST/PATH/' members; 'dir:*' once one went unrecorded
--   P..'stats'    HASH  'parents': how many 'dir:' members the scope holds ('dir:*' aside)
--   P..'settings' HASH  HGET 'no_parent': 'true' if the crawl has --no-parent
-- ARGV: P, cap, then the members to add.
-- Returns {'ok', count}; or, if the new members would pass the cap, {'full', count}
-- when the crawl has --no-parent (nothing written), else {'ok', count} having added
-- only 'dir:*' (a later --no-parent is refused: its directories are not all known).
local P, cap = ARGV[1], tonumber(ARGV[2])
local count = tonumber(redis.call('HGET', P .. 'stats', 'parents') or '0')
local asked = {}
for i = 3, #ARGV do asked[#asked + 1] = ARGV[i] end
if #asked == 0 then return {'ok', count} end
local new = {}
local there = redis.call('SMISMEMBER', P .. 'scope', unpack(asked))
for i, member in ipairs(asked) do
  if there[i] == 0 then new[#new + 1] = member end
end
if #new == 0 then return {'ok', count} end
if count + #new > cap then
  if redis.call('HGET', P .. 'settings', 'no_parent') == 'true' then
    return {'full', count}
  end
  redis.call('SADD', P .. 'scope', 'dir:*')
  return {'ok', count}
end
redis.call('SADD', P .. 'scope', unpack(new))
redis.call('HINCRBY', P .. 'stats', 'parents', #new)
return {'ok', count + #new}
