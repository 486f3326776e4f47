-- get: the current lease, without its id. One read.
-- KEYS[1] lease hash
-- Returns {1, owner, token, ttl_ms, exp} or {0}.
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token', 'ttl', 'exp')
if not cur[1] then
  return {0}
end
return {1, cur[1], tonumber(cur[2]), tonumber(cur[3]), tonumber(cur[4])}
