-- acquire: grant the lease on a free key, or return its holder's lease
-- without writing.
-- KEYS[1] lease: a string W ID TOKEN ':' TIME ':' TTL ':' OWNER (see
--         value.go), expiring by PX
-- KEYS[2] token counter: never deleted, never expiring (same hash slot)
-- KEYS[3] token floor (Bump), the slot's on Cluster (same hash slot)
-- KEYS[4] store id (NS:store-id), the slot's copy on Cluster (same slot)
-- ARGV[1] lease id (32 hex digits), ARGV[2] owner, ARGV[3] ttl in ms,
-- ARGV[4] the changes channel, ARGV[5] '1' if the server must be writing
-- its AOF (the store checked it was durable when it started), ARGV[6] the
-- store id the Store serves, '' to check none (AllowVolatile)
-- Returns the lease value now stored. The caller holds the lease if the
-- value carries its id: a new grant, or (after a lost reply and a retry)
-- the grant of an earlier run of this same call.
local cur = redis.call('GET', KEYS[1])
if cur then
  -- Held: one read, no write. A failed try that wrote would cost a durable
  -- write (an fsync) per loser and collapse a contended key.
  return cur
end

-- I7 holds only while the AOF is written: CONFIG SET appendonly no at
-- runtime, after the store's check, leaves the AOF behind, and a restart
-- that loads it would issue this grant's token again. A grant is refused
-- while it is off (INFO, a few microseconds beside a grant's fsync; a held
-- key's try above never pays it). appendfsync cannot be read here.
if ARGV[5] == '1' and not string.find(redis.call('INFO', 'persistence'), 'aof_enabled:1', 1, true) then
  return redis.error_reply('ERR redisstore: appendonly is off on this server since the store started: no grant, so that a restart cannot issue its token again')
end

-- The store id, which a namespace wiped under the running Store
-- (FLUSHALL, FLUSHDB, keys deleted, a server restarted without its data)
-- lost, or which another Store has since set anew (wiped.go): its counters
-- went with it, and a grant would issue tokens again from 1 (I1), or go on
-- from another Store's grants on the new data. Every grant reads it, not
-- only a key's first: the key's counter may be the other Store's. Read
-- before the INCR, so that a refusal writes nothing. A held key's try
-- never reads it.
if ARGV[6] ~= '' then
  local id = redis.call('GET', KEYS[4])
  if id ~= ARGV[6] then
    return redis.error_reply('ERR redisstore: store id: ' .. (string.gsub(string.sub(id or '', 1, 64), '[^%w]', '?')))
  end
end
local token = redis.call('INCR', KEYS[2])
-- The token is above the floor too: a key the counters of a restored
-- backup do not know starts above it. The floor is set only by Bump, below
-- 2^53; a held key's try never reads it.
local floor = redis.call('GET', KEYS[3])
if floor then
  floor = tonumber(floor)
  if token <= floor then
    token = floor + 1
    redis.call('SET', KEYS[2], string.format('%d', token))
  end
end
-- Tokens stay below 2^53 (lease.MaxToken, tokenLimit in store.go). A Lua
-- number is a double, exact to 2^53: compared with >= 2^53 this refuses
-- every counter value from 2^53 up, however it rounds. The counter stays
-- past the limit, so no token is ever issued twice.
if token >= 9007199254740992 then
  return redis.error_reply('ERR redisstore: token space of this key is exhausted')
end
-- The expiry reported to the client is the server's clock plus the TTL (I5):
-- the value keeps the server's TIME as it came, seconds '.' microseconds
-- padded to 6 digits, and the reader adds the TTL. Copying TIME's strings
-- costs the script less than turning them into numbers and back.
local t = redis.call('TIME')
-- W = '0': nobody waits for this lease yet (want.lua sets '1'). The token
-- goes through %d: concatenating a number writes it with %.14g, inexact
-- above 10^14.
local v = '0' .. ARGV[1] .. string.format('%d', token) .. ':' ..
  t[1] .. '.' .. string.rep('0', 6 - #t[2]) .. t[2] .. ':' .. ARGV[3] .. ':' .. ARGV[2]
redis.call('SET', KEYS[1], v, 'PX', ARGV[3])
-- Tell watchers (watch.go), in the same atomic step: 'a', the lease key's
-- length and name, and the value without W and the secret ID.
redis.call('PUBLISH', ARGV[4], 'a' .. #KEYS[1] .. ':' .. KEYS[1] .. string.sub(v, 34))
return v
