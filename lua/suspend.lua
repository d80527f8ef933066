--[[
  suspend.lua: suspend an account or lift its suspension, and report the change to webhooks
  (account.suspended / account.resumed) in the same atomic step: a suspension is never
  recorded without its event, nor an event sent for one that did not happen. Setting the state
  it already has changes nothing and emits nothing.

  Input:
    KEYS[1] wallet hash                  {a:<acct>}:wallet
    KEYS[2] outbox (list)                {a:<acct>}:outbox
    KEYS[3] outbox state (hash)          {a:<acct>}:outbox:state
    KEYS[4] outbox index (zset)          webhooks:outbox | whout:{<slot tag>}
    ARGV[1] account id
    ARGV[2] "1" suspend, "0" resume
    ARGV[3] now, ms; "0" = Redis TIME
    ARGV[4] the operator's reason ("" = none): in the event's data as `reason`

  Output: 1 changed, 0 already so, -1 unknown account (nothing written)
]]
local wallet = KEYS[1]
local account_id, value = ARGV[1], ARGV[2]
if rcall('EXISTS', wallet) == 0 then
  return -1
end
local was = rcall('HGET', wallet, 'suspended') == '1' and '1' or '0'
if was == value then
  return 0
end
rcall('HSET', wallet, 'suspended', value)
emit_event(KEYS[2], KEYS[3], KEYS[4], account_id, value == '1' and 'account.suspended' or 'account.resumed',
           {account_id = account_id, reason = (ARGV[4] or '') ~= '' and ARGV[4] or nil}, clock_ms(ARGV[3]))
return 1
