-- acquire: grant the lease on a free key, or return its holder's lease
-- without writing.
-- KEYS[1] lease: a string W ID TOKEN ':' EXP ':' TTL ':' OWNER (see value.go),
--         expiring by PX
-- KEYS[2] token counter: never deleted, never expiring (same hash slot)
-- ARGV[1] lease id (32 hex digits), ARGV[2] owner, ARGV[3] ttl in ms
-- ARGV[4] token limit: tokens issued stay below it
-- Returns the lease value now stored. The caller holds the lease if the
-- value carries its id: a new grant, or (after a lost reply and a retry)
-- the grant of an earlier run of this same call.
local cur = redis.call('GET', KEYS[1])
if cur then
  -- Held: one read, no write. A failed try that wrote would cost a durable
  -- write (an fsync) per loser and collapse a contended key.
  return cur
end

local token = redis.call('INCR', KEYS[2])
-- A Lua number is a double, exact to 2^53: compared with >= a limit of 2^53
-- this refuses every counter value from 2^53 up, however it rounds. The
-- counter stays past the limit, so no token is ever issued twice.
if token >= tonumber(ARGV[4]) then
  return redis.error_reply('ERR redisstore: token space of this key is exhausted')
end
-- The expiry reported to the client is the server's clock plus the TTL (I5).
local t = redis.call('TIME')
local exp = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[3]) * 1000
-- W = '0': nobody waits for this lease yet (want.lua sets '1').
local v = string.format('0%s%d:%d:%s:%s', ARGV[1], token, exp, ARGV[3], ARGV[2])
redis.call('SET', KEYS[1], v, 'PX', ARGV[3])
return v
