#!lua
-- revisit: keep revisited pages' records, and turn due ones into inbox entries.
-- KEYS[1]: a key of the crawl, for the cluster's routing only (not read).
--   P..'rv:'..B     HASH   8-byte URL fingerprint -> record (hashcrawl/_core/_revisit.py:
--                          due_s u32, quiet_s u32, digest 8 bytes, last_modified u32,
--                          ETag 0-22 bytes), B the fingerprint's bucket     (put, take)
--   P..'rvu:'..B    HASH   fingerprint -> the page's entry, JSON text        (put; take
--                          reads it, and deletes it with an unreadable record)
--   P..'rvdue'      ZSET   bucket -> the earliest due_s of its records      (put, take)
--   P..'rvhist'     HASH   minute (due_s // 60) -> records due in it         (put, take)
--   P..'rvs:'..M    HASH   second of minute M (due_s % 60) -> records due in it, so that
--                          status counts the current minute exactly         (put, take)
--   P..'inbox'      STREAM XADD: a due page's entry, drained to its host's owner (take)
--   P..'seenmeta'   HASH   'outstanding': + the entries take added
--   P..'idle_since' STRING deleted when take adds an entry
--   P..'stats'      HASH   revisit_changed, revisit_unchanged (put); revisit_bad (take)
--   P..'bad'        LIST   LPUSH + LTRIM: a sample of each unreadable record dropped
-- ARGV[1] = P, ARGV[2] = op:
--   'put', now_s (unused), then groups of 5: bucket, fingerprint, record, entry ('' to
--     keep the stored one), verdict ('c' changed, 'u' unchanged, '' neither).
--     Returns the number of records written.
--   'take', now_s ('' for the server's TIME), most entries, most buckets, requeue_s: the
--     due records of at most that many due buckets become inbox entries (their record
--     as V, in hex, and f: 1, before the stored entry's own fields), each record's due
--     time moved on by requeue_s, until its fetch's put writes the next one.
--     Returns {taken, buckets visited, records dropped as unreadable, now_s}.
-- Every check comes before the first write of each record, and a record or entry that
-- cannot be read is dropped with a sample in 'bad', never an error: a caller that dies,
-- or a script that stops, leaves each record either taken (its due time moved on and its
-- entry in the inbox) or untouched.
local P, op = ARGV[1], ARGV[2]
local HEAD, MAX = 20, 42
local BAD_SAMPLES = 20

local function due_of(rec)
  if type(rec) ~= 'string' or #rec < HEAD or #rec > MAX then return nil end
  local ok, due = pcall(struct.unpack, '>I4', rec)
  if not ok then return nil end
  return due
end

local function count(due, by)
  local minute, second = math.floor(due / 60), due % 60
  local left = redis.call('HINCRBY', P .. 'rvhist', minute, by)
  if left <= 0 then redis.call('HDEL', P .. 'rvhist', minute) end
  -- an older version's record has no second counted: its -1 is dropped with the field
  local within = P .. 'rvs:' .. minute
  if redis.call('HINCRBY', within, second, by) <= 0 then redis.call('HDEL', within, second) end
end

local function hex(s)
  return (s:gsub('.', function(c) return string.format('%02x', string.byte(c)) end))
end

if op == 'put' then
  local written, changed, unchanged = 0, 0, 0
  for i = 4, #ARGV, 5 do
    local bucket, fp, rec, entry, verdict = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
    local due = due_of(rec)
    if due then
      local old = due_of(redis.call('HGET', P .. 'rv:' .. bucket, fp))
      if old then count(old, -1) end
      redis.call('HSET', P .. 'rv:' .. bucket, fp, rec)
      if entry ~= '' then redis.call('HSET', P .. 'rvu:' .. bucket, fp, entry) end
      count(due, 1)
      redis.call('ZADD', P .. 'rvdue', 'LT', due, bucket)
      written = written + 1
      if verdict == 'c' then changed = changed + 1 end
      if verdict == 'u' then unchanged = unchanged + 1 end
    end
  end
  if changed > 0 then redis.call('HINCRBY', P .. 'stats', 'revisit_changed', changed) end
  if unchanged > 0 then redis.call('HINCRBY', P .. 'stats', 'revisit_unchanged', unchanged) end
  return written
end

if op ~= 'take' then return redis.error_reply('revisit: unknown op ' .. tostring(op)) end

local now = tonumber(ARGV[3])
if not now then now = tonumber(redis.call('TIME')[1]) end
local most, most_buckets, requeue = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local buckets = redis.call('ZRANGE', P .. 'rvdue', '-inf', now, 'BYSCORE', 'LIMIT', 0, most_buckets)
local taken, dropped = 0, 0

local function drop(bucket, fp, why, due)
  if due then count(due, -1) end
  redis.call('HDEL', P .. 'rv:' .. bucket, fp)
  redis.call('HDEL', P .. 'rvu:' .. bucket, fp)
  redis.call('LPUSH', P .. 'bad', 'revisit record in bucket ' .. bucket .. ' dropped: ' .. why)
  redis.call('LTRIM', P .. 'bad', 0, BAD_SAMPLES - 1)
  dropped = dropped + 1
end

local function take_one(bucket, fp, rec, due)
  local entry = redis.call('HGET', P .. 'rvu:' .. bucket, fp)
  if not entry or #entry < 2 or entry:sub(1, 1) ~= '{' then
    drop(bucket, fp, 'its entry is missing or not a JSON object', due)
    return nil
  end
  local rest = entry:sub(2)
  local head = '{"V":"' .. hex(rec) .. '","f":1'
  local payload = head .. (rest:sub(1, 1) == '}' and '' or ',') .. rest
  local next_due = now + requeue
  if next_due > 4294967295 then next_due = 4294967295 end
  redis.call('HSET', P .. 'rv:' .. bucket, fp, struct.pack('>I4', next_due) .. rec:sub(5))
  count(due, -1)
  count(next_due, 1)
  redis.call('XADD', P .. 'inbox', '*', 'r', payload)
  taken = taken + 1
  return next_due
end

for _, bucket in ipairs(buckets) do
  local fields = redis.call('HGETALL', P .. 'rv:' .. bucket)
  local earliest = nil
  for j = 1, #fields, 2 do
    local fp, rec = fields[j], fields[j + 1]
    local due = due_of(rec)
    if not due then
      drop(bucket, fp, 'not a record (' .. #rec .. ' bytes)')
    else
      if due <= now and taken < most then due = take_one(bucket, fp, rec, due) end
      if due and (not earliest or due < earliest) then earliest = due end
    end
  end
  if earliest then
    redis.call('ZADD', P .. 'rvdue', earliest, bucket)
  else
    redis.call('ZREM', P .. 'rvdue', bucket)
  end
end
if taken > 0 then
  redis.call('HINCRBY', P .. 'seenmeta', 'outstanding', taken)
  redis.call('DEL', P .. 'idle_since')
end
if dropped > 0 then redis.call('HINCRBY', P .. 'stats', 'revisit_bad', dropped) end
return {taken, #buckets, dropped, now}
