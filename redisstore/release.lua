-- release: end the lease if it is still the one named by id and token, and
-- tell waiting stores the key is free if any store asked (want.lua).
-- KEYS[1] lease
-- ARGV[1] proof: id .. token .. ':', the lease value's bytes after W
-- ARGV[2] release channel, ARGV[3] the user's key, ARGV[4] the changes
-- channel
-- Returns 1, or 0 (not held; nothing changed, nothing published).
local cur = redis.call('GET', KEYS[1])
if not cur or string.sub(cur, 2, #ARGV[1] + 1) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[4], 'r' .. #KEYS[1] .. ':' .. KEYS[1] .. string.sub(cur, 34))
-- Publish only when a waiter marked the lease: an uncontended release costs
-- no PUBLISH, and a waiter that marks after this DEL finds the key gone.
if string.byte(cur, 1) == 49 then -- '1'
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return 1
