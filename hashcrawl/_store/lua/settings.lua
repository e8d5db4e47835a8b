#!lua
-- settings: a crawl's settings, recorded when it starts, read, and changed atomically.
-- KEYS: none (every key is P .. suffix, all in one {crawl} hash slot)
--   P..'settings' HASH  'version' -> a whole number, +1 on every change; one field per
--                       crawl setting (but the scope's) -> its text, as its flag takes it
--   P..'scope'    SET   SADD of scope members ('domain:D', 'span'): started or widened;
--                       SMISMEMBER of those a worker asks for
--   P..'members'  ZSET  ZCARD: a fixed setting changes only while nobody is a member
-- ARGV: P, mode, max (the longest text read back), n, then n pairs (field, text), then
--   for 'change' the expected version and whether the change needs an empty fleet
--   (1/0), then scope members.
--   mode 'read': as 'start', but writes nothing (``hashcrawl status``, configure).
--   mode 'start': each field missing from the record takes the text given (HSETNX), so
--     the first command records every setting, defaults included, and a record that an
--     older version wrote without a newer setting is completed; the scope members are
--     added only if this call created the record (it starts the crawl).
--     Returns {'ok', created 1/0, version, text of each field (false if missing,
--     '\0big' if longer than max)..., then 1/0 per scope member: whether it is in the
--     scope}.
--   mode 'change': HSET of the pairs and version + 1 (only if any pair changes a value;
--     the expected version '' creates the record, at version 1),
--     SADD of the scope members; refused with {'moved', version} if the version is not
--     the expected one (read again and retry), or {'busy', members} if it needs an
--     empty fleet and is not. Every check comes before the first write.
--     Returns {'ok', version}.
local P, mode, max, n = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local key = P .. 'settings'
local BIG = '\0big'
local rest = 5 + 2 * n

if mode == 'start' or mode == 'read' then
  local created = 0
  if mode == 'start' then
    created = redis.call('HSETNX', key, 'version', '1')
    for i = 5, rest - 1, 2 do
      redis.call('HSETNX', key, ARGV[i], ARGV[i + 1])
    end
  end
  local scope = {}
  for i = rest, #ARGV do scope[#scope + 1] = ARGV[i] end
  if created == 1 and #scope > 0 then redis.call('SADD', P .. 'scope', unpack(scope)) end
  local fields = {'version'}
  for i = 5, rest - 1, 2 do fields[#fields + 1] = ARGV[i] end
  local reply = {'ok', created}
  for _, f in ipairs(fields) do
    if redis.call('HSTRLEN', key, f) > max then
      reply[#reply + 1] = BIG  -- not read back: written by hand, and hostile or broken
    else
      reply[#reply + 1] = redis.call('HGET', key, f)
    end
  end
  if #scope > 0 then
    for _, v in ipairs(redis.call('SMISMEMBER', P .. 'scope', unpack(scope))) do
      reply[#reply + 1] = v
    end
  end
  return reply
end

-- mode 'change'
local expected, needs_empty = ARGV[rest], ARGV[rest + 1]
local version = redis.call('HGET', key, 'version')
if (version or '') ~= expected then return {'moved', version or ''} end
local changes = false
for i = 5, rest - 1, 2 do
  if redis.call('HGET', key, ARGV[i]) ~= ARGV[i + 1] then changes = true end
end
if changes and needs_empty == '1' then
  local members = redis.call('ZCARD', P .. 'members')
  if members > 0 then return {'busy', members} end
end
if changes then
  for i = 5, rest - 1, 2 do redis.call('HSET', key, ARGV[i], ARGV[i + 1]) end
  local was = tonumber(version or '0')
  if not was or was < 0 or was > 1e15 or was ~= math.floor(was) then was = 0 end  -- by hand
  version = string.format('%d', was + 1)
  redis.call('HSET', key, 'version', version)
end
local scope = {}
for i = rest + 2, #ARGV do scope[#scope + 1] = ARGV[i] end
if #scope > 0 then redis.call('SADD', P .. 'scope', unpack(scope)) end
return {'ok', version}
