--[[
  outbox_done.lua: the account's event out for delivery is finished (delivered, or given up
  after the retry window): drop it from the outbox and hand out the next one at once, so a
  backlog flows in order without waiting for the mover. A duplicate delivery of an event that
  is no longer the one out changes nothing.

  Input:
    KEYS[1] outbox (list, oldest first, "<event id> <json>")     {a:<acct>}:outbox
    KEYS[2] outbox state (hash: seq, sent, at, entry)            {a:<acct>}:outbox:state
    KEYS[3] outbox index (zset, account id → due ms)             webhooks:outbox | whout:{<slot tag>}
    ARGV[1] account id
    ARGV[2] the finished event's id
    ARGV[3] now, ms; "0" = Redis TIME
    ARGV[4] check_ms (as outbox_take.lua)

  Output: {0} nothing more to send; {1, entry} the next event: add it to the stream
]]
local outbox, state, index = KEYS[1], KEYS[2], KEYS[3]
local account_id, event_id = ARGV[1], ARGV[2]
local check_ms = tonumber(ARGV[4])
local now = clock_ms(ARGV[3])

if rcall('HGET', state, 'sent') ~= event_id then
  return {0}
end
local head = rcall('LINDEX', outbox, 0)
if head and string.match(head, '^(%S+)') == event_id then
  rcall('LPOP', outbox)
end
rcall('HDEL', state, 'sent', 'at', 'entry')
local nxt = rcall('LINDEX', outbox, 0)
if not nxt then
  rcall('ZREM', index, account_id)
  return {0}
end
rcall('HSET', state, 'sent', string.match(nxt, '^(%S+)'), 'at', string.format('%d', now))
rcall('ZADD', index, string.format('%d', now + check_ms), account_id)
return {1, nxt}
