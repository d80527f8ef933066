--[[
  webhook_resend.lua: the operator sends a given-up delivery again. The failed record leaves the
  failed list and its event goes back on the stream as a new entry, in one step: two resends of
  one record (two operators, a retried command) add it once. Delivery then starts over (fresh
  attempts, the whole retry window); the account's outbox is not touched (its later events went
  on when this one was given up), so receivers get it out of order and de-duplicate by id.

  Input:
    KEYS[1] failed deliveries (list, JSON, newest first)   {webhooks}:failed
    KEYS[2] the stream                                      {webhooks}:stream
    ARGV[1] the failed record, exactly as the list holds it
    ARGV[2] account id, ARGV[3] event id, ARGV[4] the event's body (the stream entry's fields)

  Output: the new stream entry id, or false when the record was no longer in the list
]]
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then
  return false
end
return redis.call('XADD', KEYS[2], '*', 'account', ARGV[2], 'event', ARGV[3], 'body', ARGV[4])
