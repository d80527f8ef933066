--[[
  order_status.lua: end a top-up order that was not paid: `failed` (the customer came back and
  the gateway's verify said not paid, or the gateway refused to start the payment) or `expired`
  (nobody paid it within the reconciliation window). Emits `payment.failed` with the order.

  A paid order never changes here: paid is decided only by lua/credit.lua, in the step that
  credits it. A failed order may still become paid there (the bank is the truth, not the
  callback); it never becomes expired (failed is already an end the customer saw).

  Input:
    KEYS[1] order            hash {a:<acct>}:order:<id>
    KEYS[2] webhook outbox   list {a:<acct>}:outbox
    KEYS[3] outbox state     hash {a:<acct>}:outbox:state
    KEYS[4] outbox index     zset webhooks:outbox | whout:{<slot tag>}
    ARGV[1] status           "failed" | "expired"
    ARGV[2] reason           short text: why (kept on the order, never shown to a customer)
    ARGV[3] account id       (the event's account_id)

  Output: {code, status}
    {0, new status}          changed (and payment.failed emitted)
    {1, ""}                  no such order
    {2, status now}          unchanged: already paid, already ended, or failed → expired
]]
local order = KEYS[1]
local new, reason, account_id = ARGV[1], ARGV[2], ARGV[3]

local status = rcall('HGET', order, 'status')
if not status then
  return {1, ''}
end
if status ~= 'pending' then
  return {2, status}
end
local now = clock_ms(0)
rcall('HSET', order, 'status', new, 'reason', reason, 'ended_ms', istr(now))
emit_event(KEYS[2], KEYS[3], KEYS[4], account_id, 'payment.failed',
           {account_id = account_id, order_hash = rcall('HGETALL', order)}, now)
return {0, new}
