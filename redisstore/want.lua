-- want: mark a held lease as awaited, so that its release publishes, and
-- say how long it has left, so that the waiter wakes at its expiry.
-- KEYS[1] lease
-- Returns the lease's remaining time in ms (at least 1) if it exists, now
-- marked; 0 if the key is free. SETRANGE changes the value in place and
-- keeps the key's PX expiry. A lease marked already is only read.
local w = redis.call('GETRANGE', KEYS[1], 0, 0)
if w == '' then
  return 0
end
if w ~= '1' then
  redis.call('SETRANGE', KEYS[1], 0, '1')
end
-- PTTL is 0 for a lease expiring within the millisecond: still held now,
-- so the waiter is told 1. A lease always has a PX; -1 (none) cannot occur.
local left = redis.call('PTTL', KEYS[1])
if left == 0 then
  left = 1
end
return left
