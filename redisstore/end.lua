-- end: end a lease whoever holds it (Bump), told as a release.
-- KEYS[1] lease, KEYS[2] the store id, as floor.lua's
-- ARGV[1] release channel, ARGV[2] the user's key, ARGV[3] the changes
-- channel, ARGV[4] and ARGV[5] the store id and whether KEYS[2] must
-- hold it, as floor.lua's ARGV[2] and ARGV[3]
-- Returns 1, or 0 (no lease; nothing changed, nothing published); refuses,
-- changing nothing, a namespace whose store id is another.
if ARGV[4] ~= '' then
  local id = redis.call('GET', KEYS[2])
  if id ~= ARGV[4] and (id or ARGV[5] == '1') then
    return redis.error_reply('ERR redisstore: store id: ' .. (string.gsub(string.sub(id or '', 1, 64), '[^%w]', '?')))
  end
end
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
