-- renew: extend the lease if it is still the one named by id and token.
-- KEYS[1] lease hash
-- ARGV[1] lease id, ARGV[2] token, ARGV[3] ttl in ms
-- Returns {1, owner, exp} (exp in microseconds on the server's clock), or
-- {0}: not held, nothing changed.
local cur = redis.call('HMGET', KEYS[1], 'id', 'token', 'owner')
if cur[1] ~= ARGV[1] or tonumber(cur[2]) ~= tonumber(ARGV[2]) then
  return {0}
end
local t = redis.call('TIME')
local exp = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[3]) * 1000
redis.call('HSET', KEYS[1], 'ttl', ARGV[3], 'exp', exp)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, cur[3], exp}
