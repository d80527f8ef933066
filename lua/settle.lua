--[[
  settle.lua: a request completed (or was cut part-way after some output): charge its real
  cost, even above the hold (the balance may go negative; the next admit then answers 402),
  give back the hold, free the stream slot, add the cost to the key's `spent:<month of the hold>`
  and the day's usage aggregates, keep the request's record (no content), and bump the wallet's lifetime `charged` counter (so balance ==
  credited - charged; see lua/credit.lua). Decides, in the same step, the webhook events the
  charge causes (_lib.lua): wallet.low_balance, and key.monthly_limit_reached when the key's
  spending this month reaches its limit. Idempotent by hold id: a settled or released hold has no
  record any more, so a second call changes nothing.
  A hold the reaper already released (its node stalled past the lease, or journaled this
  settlement while the store was unreachable) is still charged: the request was served. Its
  hold was already given back, so only the charge and the aggregates apply.

  Input:
    KEYS[1] wallet hash                  {a:<acct>}:wallet
    KEYS[2] the hold's record (hash)     {a:<acct>}:hold:<hold_id>
    KEYS[3] open holds (zset)            {a:<acct>}:holds
    KEYS[4] stream slots (zset)          {a:<acct>}:streams
    KEYS[5] request records (list)       {a:<acct>}:rq
    KEYS[6] webhook outbox (list)        {a:<acct>}:outbox
    KEYS[7] webhook outbox state (hash)  {a:<acct>}:outbox:state
    KEYS[8] webhook outbox index (zset)  webhooks:outbox | whout:{<slot tag>}
    ARGV[1] hold id
    ARGV[2] cost, micro-toman (integer ≥ 0)
    ARGV[3] prompt tokens
    ARGV[4] completion tokens
    ARGV[5] the answering model's id
    ARGV[6] key-record prefix   "{a:<acct>}:key:"   (+ the hold's key id)
    ARGV[7] usage prefix        "{a:<acct>}:usage:" (+ the hold's Tehran day)
    ARGV[8] usage hash time-to-live, ms
    ARGV[9] cached prompt tokens (part of ARGV[3]; counted in the usage aggregates when > 0)
    ARGV[10] the request's record (request_record.encode, no content; "" = none: keep_record, _lib.lua)
    ARGV[11] the request id's key (request_record.rid_key)
    ARGV[12] the account id's key (request_record.acct_key)
    ARGV[13] request-index prefix (+ UTC day number)   "reqidx:" or "reqidx:{<slot tag>}:"
    ARGV[14] now, ms (the record's time; "0" = Redis TIME, for the events)
    ARGV[15] how long records are kept, ms
    ARGV[16] at most this many records per account

  Output: {code, balance, wallet_held, low_fired}
    low_fired 1: this charge took available below the low-balance threshold (wallet.low_balance
    was emitted; the node texts the customer, upgate/alerts/), else 0
    code 1  settled an open hold
    code 2  charged a hold the reaper had released
    code 0  nothing changed: unknown, already settled or released
]]
local wallet, hold_key, holds, streams, records = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local hold_id, cost = ARGV[1], ARGV[2]
local prompt, completion, model = ARGV[3], ARGV[4], ARGV[5]
local key_prefix, usage_prefix, usage_ttl_ms = ARGV[6], ARGV[7], ARGV[8]
local cached = tonumber(ARGV[9]) or 0
local outbox, outbox_state, outbox_index = KEYS[6], KEYS[7], KEYS[8]
-- the events name the account by its id, which ARGV[12] no longer is (the record's packed key):
-- read it from the wallet's name, `{a:<id>}:wallet` (upgate/store/keyspace.py tag)
local account_id = string.match(wallet, '^{a:(.-)}')

-- Each hash is read once (redis.call is the cost of a script): the hold, the key record (does
-- it still exist — its `revoked` field always does — and its monthly limit), the wallet.
local rec = read_hold(hold_key)
local state, key_id, month, day = rec[1], rec[3], rec[6], rec[7]
if state ~= 'open' and state ~= 'reaped' then
  return {0, 0, 0}
end
local key_record = key_prefix .. key_id
local k = rcall('HMGET', key_record, 'revoked', 'monthly_limit')
local key_live = k[1] ~= false
local code = 2
if state == 'open' then
  close_hold(wallet, hold_key, holds, streams, hold_id, key_prefix, '', false, 'delete', 0, rec, key_live)
  code = 1
else
  rcall('DEL', hold_key) -- its record is replaced below
end

-- the charge
local balance = rcall('HINCRBY', wallet, 'balance', istr(-tonumber(cost)))
local w = rcall('HMGET', wallet, 'held', 'credited', 'low_balance', 'low_fired', 'rec_day', 'usage_day', 'rec_gone')
if w[2] then -- else credit.lua or the audit migrates the wallet later
  rcall('HINCRBY', wallet, 'charged', cost)
end
local now = clock_ms(ARGV[14])
if key_live then
  local spent = rcall('HINCRBY', key_record, 'spent:' .. month, cost)
  local monthly = k[2]
  if monthly and spent >= tonumber(monthly) then
    limit_reached(key_record, outbox, outbox_state, outbox_index, account_id, key_id, month, monthly, spent, now)
  end
end
local fired = low_balance_check(wallet, outbox, outbox_state, outbox_index, account_id, now, false,
                  {balance, w[1], w[3], w[4]})

-- the day's aggregates for the usage report: `<dimension>|<name>|<metric>`. A day's totals are
-- the sum over its models (every settlement has one): no `total|*` fields, four commands fewer
-- (hashes written before have them too, and readers ignore them; upgate/services/usage.py)
local usage = usage_prefix .. day
local fresh = true -- every counter new: the hash may be new (made again after a DEL, too)
for _, dim in ipairs({'key|' .. key_id, 'model|' .. model}) do
  if rcall('HINCRBY', usage, dim .. '|requests', 1) ~= 1 then
    fresh = false
  end
  rcall('HINCRBY', usage, dim .. '|prompt_tokens', prompt)
  rcall('HINCRBY', usage, dim .. '|completion_tokens', completion)
  rcall('HINCRBY', usage, dim .. '|cost', cost)
  if cached > 0 then rcall('HINCRBY', usage, dim .. '|cached_tokens', cached) end
end
-- its expiry once per account and usage day (the wallet's `usage_day`), as keep_record does:
-- one command a request fewer; the hash lives its time-to-live after its day's first settlement
if w[6] ~= day or fresh then
  rcall('PEXPIRE', usage, usage_ttl_ms)
  if w[6] ~= day then
    rcall('HSET', wallet, 'usage_day', day)
  end
end

keep_record(records, ARGV[13], ARGV[12], ARGV[11], ARGV[10], now, tonumber(ARGV[15]),
            tonumber(ARGV[16]), wallet, w[5], w[7], state == 'reaped' and rec[10] or nil)

return {code, balance, tonumber(w[1]) or 0, fired}
