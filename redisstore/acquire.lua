-- acquire: grant the lease on a free key, or name its holder without writing.
-- KEYS[1] lease hash {id, owner, token, ttl, exp}, expiring by PX
-- KEYS[2] token counter: never deleted, never expiring (same hash slot)
-- ARGV[1] lease id (32 hex digits), ARGV[2] owner, ARGV[3] ttl in ms
-- ARGV[4] token limit: tokens issued stay below it
-- Returns {1, token, exp} when the caller holds the lease, or
-- {0, owner, token, exp} naming the holder; exp is the expiry in
-- microseconds since the epoch on the server's clock (TIME).
local cur = redis.call('HMGET', KEYS[1], 'id', 'owner', 'token', 'exp')
if cur[1] then
  -- Held: one read, no write. A failed try that wrote would cost a durable
  -- write (an fsync) per loser and collapse a contended key.
  if cur[1] == ARGV[1] then
    -- Our own id: this call already ran and its reply was lost (the client
    -- retried after a dropped connection). The lease is ours.
    return {1, tonumber(cur[3]), tonumber(cur[4])}
  end
  return {0, cur[2], tonumber(cur[3]), tonumber(cur[4])}
end

local token = redis.call('INCR', KEYS[2])
-- A Lua number is a double, exact to 2^53: compared with >= a limit of 2^53
-- this refuses every counter value from 2^53 up, however it rounds. The
-- counter stays past the limit, so no token is ever issued twice.
if token >= tonumber(ARGV[4]) then
  return redis.error_reply('ERR redisstore: token space of this key is exhausted')
end
local t = redis.call('TIME')
local exp = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[3]) * 1000
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'owner', ARGV[2], 'token', token, 'ttl', ARGV[3], 'exp', exp)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, token, exp}
