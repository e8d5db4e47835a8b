#!lua
-- holder: who has a worker's name now (read only; see join.lua's names).
--   P..'members' ZSET, P..'w:'..member HASH (machine, pid, host), P..'applied' HASH,
--   P..'epoch' STRING: read.
-- ARGV: P, name, now_ms ('' for the server's TIME; simulations drive time through it).
-- Returns {now_ms} when no member has the name, else {now_ms, member, last heartbeat ms,
--   machine, pid, host, whether it is behind the newest epoch (1 or 0)}.
local P, name = ARGV[1], ARGV[2]
local now = tonumber(ARGV[3])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
for _, m in ipairs(redis.call('ZRANGE', P .. 'members', 0, -1)) do
  if string.match(m, '^[^~]*') == name then
    local info = redis.call('HMGET', P .. 'w:' .. m, 'machine', 'pid', 'host')
    local applied = tonumber(redis.call('HGET', P .. 'applied', m) or '0')
    local behind = applied < tonumber(redis.call('GET', P .. 'epoch') or '0') and 1 or 0
    return {now, m, redis.call('ZSCORE', P .. 'members', m), info[1] or '', info[2] or '',
      info[3] or '', behind}
  end
end
return {now}
