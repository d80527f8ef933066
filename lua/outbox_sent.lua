--[[
  outbox_sent.lua: record the stream entry that carries the account's event out for delivery,
  so the mover's check (outbox_take.lua) can tell a live entry from one that never got there.

  Input:
    KEYS[1] outbox state (hash)    {a:<acct>}:outbox:state
    ARGV[1] event id
    ARGV[2] stream entry id

  Output: 1 recorded; 0 the event is no longer the one out (delivered meanwhile): nothing
]]
if rcall('HGET', KEYS[1], 'sent') ~= ARGV[1] then
  return 0
end
rcall('HSET', KEYS[1], 'entry', ARGV[2])
return 1
