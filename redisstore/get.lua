-- get: the current lease, without its id. Read only.
-- KEYS[1] lease hash
-- Returns {1, owner, token, ttl_ms, expires_us} or {0}.
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token', 'ttl')
if not cur[1] then
  return {0}
end
local pttl = redis.call('PTTL', KEYS[1])
local t = redis.call('TIME')
return {1, cur[1], tonumber(cur[2]), tonumber(cur[3]), tonumber(t[1]) * 1000000 + tonumber(t[2]) + pttl * 1000}
