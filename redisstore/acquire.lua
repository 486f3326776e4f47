-- acquire: grant the lease on a free key, or name its holder without writing.
-- KEYS[1] lease hash {id, owner, token, ttl}, expiring by PX
-- KEYS[2] token counter: never deleted, never expiring (same hash slot)
-- ARGV[1] lease id (32 hex digits), ARGV[2] owner, ARGV[3] ttl in ms
-- ARGV[4] highest token the store may issue (2^53)
-- Returns {1, token, expires_us} when the caller holds the lease, or
-- {0, owner, token, expires_us} naming the holder; expires_us is on the
-- server's clock (TIME).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local cur = redis.call('HMGET', KEYS[1], 'id', 'owner', 'token')
if cur[1] then
  -- Held: read only. A failed try that wrote would cost a durable write
  -- (an fsync) per loser and collapse a contended key.
  local exp = now_us() + redis.call('PTTL', KEYS[1]) * 1000
  if cur[1] == ARGV[1] then
    -- Our own id: this call already ran and its reply was lost (the client
    -- retried after a dropped connection). The lease is ours.
    return {1, tonumber(cur[3]), exp}
  end
  return {0, cur[2], tonumber(cur[3]), exp}
end

-- Compared before INCR: a Lua number is a double, exact only up to 2^53,
-- so 2^53 + 1 would read as 2^53.
if tonumber(redis.call('GET', KEYS[2]) or '0') >= tonumber(ARGV[4]) then
  return redis.error_reply('ERR redisstore: token space of this key is exhausted')
end
local token = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'owner', ARGV[2], 'token', token, 'ttl', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, token, now_us() + tonumber(ARGV[3]) * 1000}
