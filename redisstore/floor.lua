-- floor: raise a token floor (Bump); a floor never goes down.
-- KEYS[1] token floor
-- ARGV[1] the new floor, below 2^53
-- Returns the floor now stored.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local new = tonumber(ARGV[1])
if cur < new then
  redis.call('SET', KEYS[1], ARGV[1])
  return ARGV[1]
end
return string.format('%d', cur)
