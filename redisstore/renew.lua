-- renew: extend the lease if it is still the one named by id and token.
-- KEYS[1] lease
-- ARGV[1] proof: id .. token .. ':', the lease value's bytes after W
-- ARGV[2] ttl in ms, ARGV[3] the changes channel
-- Returns the new lease value, or false (nil: not held, nothing changed).
local cur = redis.call('GET', KEYS[1])
local n = #ARGV[1]
if not cur or string.sub(cur, 2, n + 1) ~= ARGV[1] then
  return false
end
-- cur is W PROOF TIME ':' TTL ':' OWNER; keep W (a waiter's mark), the
-- proof and the owner, and replace TIME (with the server's TIME now, as
-- acquire.lua writes it) and TTL.
local e = string.find(cur, ':', n + 2, true)
local o = e and string.find(cur, ':', e + 1, true)
if not o then
  return redis.error_reply('ERR redisstore: malformed lease value')
end
local t = redis.call('TIME')
local v = string.sub(cur, 1, n + 1) .. t[1] .. '.' .. string.rep('0', 6 - #t[2]) .. t[2] ..
  ':' .. ARGV[2] .. string.sub(cur, o)
redis.call('SET', KEYS[1], v, 'PX', ARGV[2])
redis.call('PUBLISH', ARGV[3], 'n' .. #KEYS[1] .. ':' .. KEYS[1] .. string.sub(v, 34))
return v
