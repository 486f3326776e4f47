-- set: write value and token if the token is admitted, comparing with the
-- token stored beside the value, as one atomic step (I6).
-- KEYS[1] the resource: a hash {value, token}
-- ARGV[1] the writer's token, ARGV[2] the value, ARGV[3] mode: "strict"
--         admits token > highest, anything else token >= highest
-- Returns {1, token} when written, or {0, highest} when rejected (nothing
-- changed).
local highest = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
local token = tonumber(ARGV[1])
if token < highest or (ARGV[3] == 'strict' and token == highest) then
  return {0, highest}
end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'token', ARGV[1])
return {1, token}
