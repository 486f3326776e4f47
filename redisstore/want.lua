-- want: mark a held lease as awaited, so that its release publishes.
-- KEYS[1] lease
-- Returns 1 if the lease exists (now marked), 0 if the key is free.
-- SETRANGE changes the value in place and keeps the key's PX expiry. A
-- lease marked already is only read.
local w = redis.call('GETRANGE', KEYS[1], 0, 0)
if w == '' then
  return 0
end
if w ~= '1' then
  redis.call('SETRANGE', KEYS[1], 0, '1')
end
return 1
