--[[
  outbox_take.lua: the mover's step for one account: hand out the account's OLDEST undelivered
  event, one at a time, so events reach the delivery stream (and the receiver) in the order they
  were decided. While an event is out (state `sent`), nothing else of the account is handed out:
  outbox_done.lua hands out the next one when that one is delivered or given up.
  An event out for longer than check_ms is handed out again as a "check": the caller looks for
  its stream entry and re-adds it when it is missing (a node died between this step and XADD,
  or the entry was lost). A receiver may therefore see an event twice; it de-duplicates by id.

  Input:
    KEYS[1] outbox (list, oldest first, "<event id> <json>")     {a:<acct>}:outbox
    KEYS[2] outbox state (hash: seq, sent, at, entry)            {a:<acct>}:outbox:state
    KEYS[3] outbox index (zset, account id → due ms)             webhooks:outbox | whout:{<slot tag>}
    ARGV[1] account id
    ARGV[2] now, ms; "0" = Redis TIME
    ARGV[3] check_ms: how long an event may be out before it is checked

  Output: {kind, entry, stream_id, length} — length: the outbox's events (over OUTBOX_MAX, the
  caller moves the excess to the failed list: lua/outbox_overflow.lua)
    {0, '', '', n}        nothing to hand out (empty, or the event out is not due for a check)
    {1, entry, '', n}     a new oldest event: add it to the stream
    {2, entry, stream_id, n} the event out is due for a check (stream_id "" = never recorded)
]]
local outbox, state, index = KEYS[1], KEYS[2], KEYS[3]
local account_id = ARGV[1]
local check_ms = tonumber(ARGV[3])
local now = clock_ms(ARGV[2])

local head = rcall('LINDEX', outbox, 0)
if not head then
  rcall('ZREM', index, account_id)
  rcall('HDEL', state, 'sent', 'at', 'entry')
  return {0, '', '', 0}
end
local n = rcall('LLEN', outbox)
local id = string.match(head, '^(%S+)')
local out = rcall('HMGET', state, 'sent', 'at', 'entry')
if out[1] == id then
  local due = (tonumber(out[2]) or 0) + check_ms
  if now < due then
    rcall('ZADD', index, string.format('%d', due), account_id)
    return {0, '', '', n}
  end
  rcall('HSET', state, 'at', string.format('%d', now))
  rcall('ZADD', index, string.format('%d', now + check_ms), account_id)
  return {2, head, out[3] or '', n}
end
rcall('HSET', state, 'sent', id, 'at', string.format('%d', now))
rcall('HDEL', state, 'entry')
rcall('ZADD', index, string.format('%d', now + check_ms), account_id)
return {1, head, '', n}
