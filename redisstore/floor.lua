-- floor: raise a token floor (Bump); a floor never goes down.
-- KEYS[1] token floor, KEYS[2] the store id (NS:store-id; the slot's copy
-- on Cluster, same slot)
-- ARGV[1] the new floor, below 2^53, ARGV[2] the store id the Store
-- serves ('' to check none: AllowVolatile), ARGV[3] '1' if KEYS[2] must
-- hold it, '0' if it may be missing (a slot's copy, made by the slot's
-- first grant: wiped.go)
-- Returns the floor now stored; refuses, writing nothing, a namespace
-- whose store id is another (wiped under the Store, and made anew).
if ARGV[2] ~= '' then
  local id = redis.call('GET', KEYS[2])
  if id ~= ARGV[2] and (id or ARGV[3] == '1') then
    return redis.error_reply('ERR redisstore: store id: ' .. (string.gsub(string.sub(id or '', 1, 64), '[^%w]', '?')))
  end
end
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local new = tonumber(ARGV[1])
if cur < new then
  redis.call('SET', KEYS[1], ARGV[1])
  return ARGV[1]
end
return string.format('%d', cur)
