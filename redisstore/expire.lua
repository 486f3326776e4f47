-- expire: tell watchers that a lease has expired, if it has.
-- KEYS[1] lease, KEYS[2] token counter
-- ARGV[1] the token watchers were told is held, ARGV[2] the changes channel
-- Returns the lease value and its remaining PX time in ms if a lease is
-- there (the caller's, renewed, or a successor); else the token counter
-- ('' if there is none), having published 'x' (expired) if no later token
-- was issued. A lease released rather than expired published 'r' before
-- this script ran, on the same channel, so watchers hear the release first
-- and drop the 'x'. A counter gone, or below the token, is a sign of a
-- wipe, which the caller looks into (wiped.go).
local v = redis.call('GET', KEYS[1])
if v then
  return {v, redis.call('PTTL', KEYS[1])}
end
local c = redis.call('GET', KEYS[2])
if c == ARGV[1] then
  redis.call('PUBLISH', ARGV[2], 'x' .. #KEYS[1] .. ':' .. KEYS[1] .. ARGV[1])
end
return c or ''
