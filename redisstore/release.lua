-- release: end the lease if it is still the one named by id and token, and
-- tell waiting stores the key may be free.
-- KEYS[1] lease hash
-- ARGV[1] lease id, ARGV[2] token, ARGV[3] release channel, ARGV[4] the key
-- Returns 1, or 0 (not held; nothing changed, nothing published).
local cur = redis.call('HMGET', KEYS[1], 'id', 'token')
if cur[1] ~= ARGV[1] or tonumber(cur[2]) ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
