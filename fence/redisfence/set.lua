-- set: write value and token if the token is admitted, comparing with the
-- token stored beside the value, as one atomic step (I6).
-- KEYS[1] the resource: a hash {value, token, call}
-- ARGV[1] the writer's token, ARGV[2] the value, ARGV[3] mode: "strict"
--         admits token > highest, anything else token >= highest;
--         ARGV[4] the Set call's own random ID, the same in every attempt
--         of one call
-- Returns {1, token} when written, or {0, highest} when rejected (nothing
-- changed). A call sent again (its client lost the first answer and
-- retried) whose first attempt wrote what is still stored gets {1, token}
-- again: that is its write. A stored token that is not one this script can
-- have written (1 to 2^53 in plain decimal) is an error, and nothing
-- changes: tonumber would read "nan" as a number no token is less than,
-- "-1" or "0x10" as numbers the guard never stored.
local cur = redis.call('HMGET', KEYS[1], 'token', 'call')
local stored = cur[1]
local highest = 0
if stored then
  -- Compared as text: a double cannot tell 2^53 + 1 from 2^53.
  if not string.match(stored, '^[1-9][0-9]*$') or #stored > 16 or (#stored == 16 and stored > '9007199254740992') then
    return redis.error_reply('redisfence: stored token of ' .. KEYS[1] .. ' is not a fencing token')
  end
  highest = tonumber(stored)
  if stored == ARGV[1] and cur[2] == ARGV[4] then
    return {1, highest}
  end
end
local token = tonumber(ARGV[1])
if token < highest or (ARGV[3] == 'strict' and token == highest) then
  return {0, highest}
end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'token', ARGV[1], 'call', ARGV[4])
return {1, token}
