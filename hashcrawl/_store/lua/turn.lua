#!lua
-- turn: the next turn of a shared host (one a render may fetch from: every worker's
-- requests to it take their turns here, one clock of record for the fleet).
--   P..'turn:'..host  HASH  'last': server ms of the latest turn granted; 'gap': the
--     longest gap a caller gave (its --delay or the host's Crawl-delay), kept; 'margin':
--     the latest turn's margin. Expires once a turn at once would be due anyway (plus a
--     minute, so that the gap outlives a short pause).
-- ARGV: P, host, gap_ms, margin_ms, most_wait_ms, now_ms ('' for the server's TIME).
-- A turn is a slot: it starts gap + margin + 1 ms after the latest one (its holder may
-- send within its margin of the slot; the 1 ms covers TIME read to the millisecond).
-- Returns {1, wait_ms}: a turn reserved wait_ms from now (0: at once); or {0, wait_ms}:
-- the next slot is further than most_wait_ms away, and nothing was reserved.
local P, host = ARGV[1], ARGV[2]
local gap, margin, most = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = tonumber(ARGV[6])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local key = P .. 'turn:' .. host
local kept = redis.call('HMGET', key, 'last', 'gap', 'margin')
gap = math.max(gap, tonumber(kept[2] or '0'))
local at = now
if kept[1] then
  at = math.max(now, tonumber(kept[1]) + gap + tonumber(kept[3] or '0') + 1)
end
local wait = at - now
if wait > most then
  return {0, wait}
end
redis.call('HSET', key, 'last', at, 'gap', gap, 'margin', margin)
redis.call('PEXPIRE', key, wait + gap + margin + 1 + 60000)
return {1, wait}
