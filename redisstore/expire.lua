-- expire: tell watchers that a lease has expired, if it has.
-- KEYS[1] lease, KEYS[2] token counter
-- ARGV[1] the token watchers were told is held, ARGV[2] the changes channel
-- Returns the lease value and its remaining PX time in ms if a lease is
-- there (the caller's, renewed, or a successor); else false, having
-- published 'x' (expired) if no later token was issued. A lease released
-- rather than expired published 'r' before this script ran, on the same
-- channel, so watchers hear the release first and drop the 'x'.
local v = redis.call('GET', KEYS[1])
if v then
  return {v, redis.call('PTTL', KEYS[1])}
end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('PUBLISH', ARGV[2], 'x' .. #KEYS[1] .. ':' .. KEYS[1] .. ARGV[1])
end
return false
