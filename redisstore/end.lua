-- end: end a lease whoever holds it (Bump), told as a release.
-- KEYS[1] lease
-- ARGV[1] release channel, ARGV[2] the user's key, ARGV[3] the changes
-- channel
-- Returns 1, or 0 (no lease; nothing changed, nothing published).
local cur = redis.call('GET', KEYS[1])
if not cur then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[3], 'r' .. #KEYS[1] .. ':' .. KEYS[1] .. string.sub(cur, 34))
if string.byte(cur, 1) == 49 then -- '1': a waiter marked it (want.lua)
  redis.call('PUBLISH', ARGV[1], ARGV[2])
end
return 1
