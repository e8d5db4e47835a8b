#!lua
-- commit: the one atomic step that finishes work and routes what it found.
-- It acknowledges entries of one stream, moves entries between streams, appends new
-- entries that pass the seen filter, and records pacing, dead letters and counters,
-- all or nothing, and only while the caller is a member at the epoch it routed by.
--   P..'members'      ZSET   checked: a worker that is no longer a member is fenced
--   P..'epoch'        STRING checked: routing by a stale ring is refused
--   P..'q:'..worker   STREAM XACK + XDEL of finished entries; XADD of routed ones
--   P..'inbox'        STREAM XADD when no worker is alive (drained like an orphan)
--   P..'seen:'..i     STRING Bloom filter layer i (bits, set with BITFIELD)
--   P..'seenmeta'     HASH   L (layers), n (entries in the last layer), c0, p; seen, queued;
--                            outstanding: + entries added, - entries deleted (read and
--                            written with the filter's fill: no command of its own)
--   P..'idle_since'   STRING deleted when something is added while nothing was outstanding
--   P..'pace'         HASH   host -> pacing state handed to its next owner; HDEL of
--                            records their new owner has read, if still as read (unpace)
--   P..'park:'..host  ZSET   a host's overflow: 'id payload' scored by priority, then age
--   P..'parked'       SET    hosts with an overflow set
--   P..'applied'      HASH   worker -> epoch whose handoffs are done
--   P..'dead'         HASH   fingerprint -> record (error, entry), pages out of attempts
--   P..'bad'          LIST   LPUSH + LTRIM: the newest samples of unreadable entries
--                            (only of those this call removed: counted once however
--                            many workers drain the same orphan stream)
--   P..'instance'     STRING SET NX by a submit (w ''): the crawl's instance marker
--   P..'stats'        HASH   fleet counters (dead, queue_bad, parks: entries ever parked)
--   P..'scope'        SET    checked: its size is the scope's version (it only grows)
-- ARGV[1] = P, ARGV[2] = JSON batch:
--   w: worker id ('' for a submitter), e: epoch the batch was routed at,
--   src: stream acknowledged and moved from ('' for none), ack: [ids],
--   mv: [[id, target, payload]]  an entry of src re-routed (skipped if already gone),
--   once: [[id, target, payload, ...]]  an entry of src acknowledged, and the entries it
--     led to added, only if it is still there (skipped if already gone),
--   add: [[target, payload, h1, h2, filter]]  a new entry (filter 1: seen-filter gated),
--   park: [[id, host, score, payload]]  an entry of src moved to its host's overflow set,
--   pace: [host, state, ...], unpace: [host, state, ...], applied: epoch or absent,
--   dead: [key, record, ...], bad: [[id, sample], ...]  an unreadable entry of src,
--   acknowledged and counted (stats.queue_bad) if still there, i: a submitter's marker,
--   stats: {field: increment},
--   sv: the size of the scope the batch's links were filtered by, or absent (no check),
--   widen: [scope members] added to the scope (hosts a submitted URL redirected to)
-- Every check comes before the first write, and every list is unpacked in chunks (Lua's
-- unpack fails past a few thousand values), so the script never stops half done. Large
-- batches are split by the caller into several calls (hashcrawl/_core/_batch.py); each part
-- carries the epoch and scope version, and only the last one widens the scope.
-- Returns {'ok', added, acked, moved, scope size}, {'stale', epoch}, {'rescope', size} or
--   {'fenced'}.
local P = ARGV[1]
local b = cjson.decode(ARGV[2])
local CHUNK = 1000
local BAD_SAMPLES = 20
-- Runs cmd on key with the items of list, CHUNK at a time (pairs stay whole: CHUNK is even).
local function chunked(cmd, key, list)
  local total = 0
  for s = 1, #list, CHUNK do
    total = total + redis.call(cmd, key, unpack(list, s, math.min(s + CHUNK - 1, #list)))
  end
  return total
end

if b.w ~= '' and not redis.call('ZSCORE', P .. 'members', b.w) then
  return {'fenced'}
end
local epoch = tonumber(redis.call('GET', P .. 'epoch') or '0')
if epoch ~= tonumber(b.e) then
  return {'stale', epoch}
end
if b.sv then
  -- The scope grew since the caller read it: a link it left out may now be in scope.
  local size = redis.call('SCARD', P .. 'scope')
  if size ~= tonumber(b.sv) then
    return {'rescope', size}
  end
end
local widened = chunked('SADD', P .. 'scope', b.widen or {})
if b.w == '' and b.i then redis.call('SET', P .. 'instance', b.i, 'NX') end

-- The seen filter: a scalable Bloom filter. Layer i holds c0 * 2^i entries at a false
-- positive rate of p / 2^(i+1), so the rate over all layers stays below p.
local meta = redis.call('HMGET', P .. 'seenmeta', 'L', 'n', 'c0', 'p', 'seen', 'queued', 'outstanding')
local L, n = tonumber(meta[1] or '0'), tonumber(meta[2] or '0')
local L0, n0 = L, n
local seen0, queued0 = tonumber(meta[5] or '0'), tonumber(meta[6] or '0')
-- A count written by hand that is not a number counts as 0: the heartbeat's recount
-- puts it right once the crawl looks idle.
local before = tonumber(meta[7] or '0') or 0
local c0, p = tonumber(meta[3] or '1048576'), tonumber(meta[4] or '1e-6')
if L == 0 then
  L = 1
  redis.call('HSET', P .. 'seenmeta', 'L', 1, 'n', 0, 'c0', c0, 'p', p)
end
local function capacity(i) return c0 * 2 ^ math.min(i, 6) end
local function shape(i)
  local k = math.ceil(math.log(2 ^ (i + 1) / p) / math.log(2))
  return math.ceil(capacity(i) * k / math.log(2)), k
end
local function bits(rec, i)
  local m, k = shape(i)
  local h1, h2, out = tonumber(rec[3]), tonumber(rec[4]), {}
  for j = 0, k - 1 do out[#out + 1] = (h1 + j * h2) % m end
  return out
end
-- Runs BITFIELD ops in chunks (Lua's unpack limit) and returns every reply in order.
local function bitfield(key, ops, width)
  local replies, chunk = {}, 1800 * width
  for s = 1, #ops, chunk do
    local part = redis.call('BITFIELD', key, unpack(ops, s, math.min(s + chunk - 1, #ops)))
    for _, v in ipairs(part) do replies[#replies + 1] = v end
  end
  return replies
end
local function in_layer(cands, i)
  local ops, key = {}, P .. 'seen:' .. i
  for _, rec in ipairs(cands) do
    for _, o in ipairs(bits(rec, i)) do
      ops[#ops + 1] = 'GET'; ops[#ops + 1] = 'u1'; ops[#ops + 1] = o
    end
  end
  local got, r, keep = bitfield(key, ops, 3), 1, {}
  for _, rec in ipairs(cands) do
    local _, k = shape(i)
    local all = true
    for _ = 1, k do
      if got[r] == 0 then all = false end
      r = r + 1
    end
    if not all then keep[#keep + 1] = rec end
  end
  return keep
end
local function insert(cands)
  if #cands == 0 then return {} end
  if n >= capacity(L - 1) then
    -- The full layer becomes a read-only one: candidates must be checked against it too.
    cands = in_layer(cands, L - 1)
    L, n = L + 1, 0
    if #cands == 0 then
      return {}
    end
  end
  local i, ops = L - 1, {}
  for _, rec in ipairs(cands) do
    for _, o in ipairs(bits(rec, i)) do
      ops[#ops + 1] = 'SET'; ops[#ops + 1] = 'u1'; ops[#ops + 1] = o; ops[#ops + 1] = 1
    end
  end
  local old, r, fresh = bitfield(P .. 'seen:' .. i, ops, 4), 1, {}
  local _, k = shape(i)
  for _, rec in ipairs(cands) do
    local was = true
    for _ = 1, k do
      if old[r] == 0 then was = false end
      r = r + 1
    end
    if not was then
      fresh[#fresh + 1] = rec
      n = n + 1
    end
  end
  return fresh
end

local filtered, appended = {}, {}
for _, rec in ipairs(b.add or {}) do
  if tonumber(rec[5]) == 1 then filtered[#filtered + 1] = rec else appended[#appended + 1] = rec end
end
local new_seen = 0
if #filtered > 0 then
  for i = 0, L - 2 do filtered = in_layer(filtered, i) end
  filtered = insert(filtered)
  new_seen = #filtered
  for _, rec in ipairs(filtered) do appended[#appended + 1] = rec end
end

local added, deleted, moved, acked = 0, 0, 0, 0
for _, rec in ipairs(appended) do
  redis.call('XADD', rec[1], '*', 'r', rec[2])
  added = added + 1
end
if b.src ~= '' then
  for _, mv in ipairs(b.mv or {}) do
    if redis.call('XDEL', b.src, mv[1]) == 1 then
      redis.call('XACK', b.src, 'g', mv[1])
      redis.call('XADD', mv[2], '*', 'r', mv[3])
      moved = moved + 1
    end
  end
  -- Parked entries leave the stream for their host's overflow set: memory stays bounded
  -- and a long backlog of one host never stands in front of the others. Each is parked
  -- only if this call deleted it (a drain may have moved it meanwhile); the acks and the
  -- overflow sets then take them all at once, a command per host, not four an entry.
  local parked, hosts, members = {}, {}, {}
  for _, pk in ipairs(b.park or {}) do
    if redis.call('XDEL', b.src, pk[1]) == 1 then
      parked[#parked + 1] = pk[1]
      local of = members[pk[2]]
      if not of then
        of = {}
        members[pk[2]] = of
        hosts[#hosts + 1] = pk[2]
      end
      of[#of + 1] = pk[3]
      of[#of + 1] = pk[1] .. ' ' .. pk[4]
    end
  end
  for s = 1, #parked, CHUNK do
    redis.call('XACK', b.src, 'g', unpack(parked, s, math.min(s + CHUNK - 1, #parked)))
  end
  for _, host in ipairs(hosts) do
    chunked('ZADD', P .. 'park:' .. host, members[host])
  end
  chunked('SADD', P .. 'parked', hosts)
  if #parked > 0 then
    b.stats = b.stats or {}
    b.stats.parks = (b.stats.parks or 0) + #parked
  end
  local bad = 0
  for _, bd in ipairs(b.bad or {}) do
    if redis.call('XDEL', b.src, bd[1]) == 1 then
      redis.call('XACK', b.src, 'g', bd[1])
      redis.call('LPUSH', P .. 'bad', bd[2])
      acked, bad = acked + 1, bad + 1
    end
  end
  if bad > 0 then
    redis.call('LTRIM', P .. 'bad', 0, BAD_SAMPLES - 1)
    b.stats = b.stats or {}
    b.stats.queue_bad = (b.stats.queue_bad or 0) + bad
  end
  for s = 1, #(b.ack or {}), CHUNK do
    local part = {unpack(b.ack, s, math.min(s + CHUNK - 1, #b.ack))}
    redis.call('XACK', b.src, 'g', unpack(part))
    acked = acked + redis.call('XDEL', b.src, unpack(part))
  end
  -- An entry that leads to entries the seen filter cannot stop twice (its retry, follows
  -- with dont_filter) adds them only while it is still there: a batch sent again after a
  -- lost reply adds nothing twice.
  for _, o in ipairs(b.once or {}) do
    if redis.call('XDEL', b.src, o[1]) == 1 then
      redis.call('XACK', b.src, 'g', o[1])
      acked = acked + 1
      for j = 2, #o, 2 do
        redis.call('XADD', o[j], '*', 'r', o[j + 1])
        added = added + 1
      end
    end
  end
end
local delta = added - acked
-- idle_since is set only while nothing is outstanding, and every add that ends that
-- deletes it: with entries outstanding before this commit, there is none to delete.
if added > 0 and (delta == 0 or before <= 0) then redis.call('DEL', P .. 'idle_since') end
-- A record read by its host's new owner is deleted only if nobody wrote it since: the
-- same worker may have handed the host on meanwhile, and that record is the next owner's.
local unpace = b.unpace or {}
for j = 1, #unpace, 2 do
  if redis.call('HGET', P .. 'pace', unpace[j]) == unpace[j + 1] then
    redis.call('HDEL', P .. 'pace', unpace[j])
  end
end
chunked('HSET', P .. 'pace', b.pace or {})
if b.applied then redis.call('HSET', P .. 'applied', b.w, b.applied) end
local stats = b.stats or {}
if b.dead and #b.dead > 0 then
  chunked('HSET', P .. 'dead', b.dead)
  stats.dead = (stats.dead or 0) + #b.dead / 2
end

-- The seen filter's fill and the three busiest counters go back in one HSET.
if L ~= L0 or n ~= n0 or added > 0 then
  -- One line: scripts/mutants' Lua mutator drops a redis.call a line at a time.
  redis.call('HSET', P .. 'seenmeta', 'L', L, 'n', n, 'seen', seen0 + new_seen, 'queued', queued0 + added, 'outstanding', before + delta)
elseif delta ~= 0 then
  redis.call('HSET', P .. 'seenmeta', 'outstanding', before + delta)
end
local flat = {}
for f, v in pairs(stats) do
  if tonumber(v) ~= 0 then flat[#flat + 1] = f; flat[#flat + 1] = v end
end
-- Counters are kept as a few HINCRBYs; one field each is what Redis offers.
for j = 1, #flat, 2 do redis.call('HINCRBY', P .. 'stats', flat[j], flat[j + 1]) end
-- The scope's size, known without asking when it was checked above and nothing joined it.
local scope = tonumber(b.sv)
if not scope or widened > 0 then scope = redis.call('SCARD', P .. 'scope') end
return {'ok', added, acked, moved, scope}
