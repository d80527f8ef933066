--[[
  credit.lua: record one transaction of an account's wallet (opening balance, top-up or
  adjustment) atomically with the balance change it makes, idempotently by its ref.

  In one step, in the account's slot:
  - the account must exist (its wallet hash);
  - an account from before transactions were recorded (no `credited` field) first gets an
    honest opening transaction equal to its balance then (`migrate`, _lib.lua);
  - a ref already used answers the first transaction (replayed) when kind and amount match, and
    a conflict otherwise; nothing changes either way (the ref is re-set to the same value so the
    caller's WAIT covers the original write too);
  - kind "opening" applies only to an account without any transaction yet (account create's
    second step; a retry replays the first);
  - the new balance must stay within +/- max (2^53 micro-toman, the exact range of Lua numbers);
    the range test never forms balance + amount, so every comparison is exact;
  - balance and the lifetime `credited` counter move by the amount (HINCRBY on the decimal text:
    64-bit integers in Redis), and the record is appended to the account's transaction log;
  - a top-up or adjustment is reported to webhooks (wallet.topup, carrying the record, which
    upgate/webhooks/events.py renders as the transaction object), and the low-balance alert is
    decided: a debit may fire it, a credit that brings the available balance back re-arms it.

  A payment's credit (upgate/payments/) also names its order (KEYS[7], in the same slot): the order
  must exist, be of this amount and carry this ref, or nothing is written; when the credit is
  applied or replayed, the order is marked paid (ref_id, card_pan, paid_ms, transaction_id) in
  this same step if it is not already, and `payment.succeeded` is emitted. The order's state and
  the credit can therefore never diverge, however many callers race.

  A record in the log is the string "<time ms>|<kind>|<amount>|<balance after>|<json>", where
  <json> (built by upgate/services/transactions.py) holds id, ref, note and actor; amounts in micro-toman.

  Input:
    KEYS[1] wallet           hash {a:<acct>}:wallet (balance, credited, charged: micro-toman)
    KEYS[2] refs             hash {a:<acct>}:refs   ref -> "<log position>|<kind>|<amount>"
    KEYS[3] transaction log  list {a:<acct>}:txns   oldest first
    KEYS[4] webhook outbox   list {a:<acct>}:outbox
    KEYS[5] outbox state     hash {a:<acct>}:outbox:state
    KEYS[6] outbox index     zset webhooks:outbox | whout:{<slot tag>}
    KEYS[7] order            hash {a:<acct>}:order:<id> (optional: a payment's credit)
    ARGV[7] account id       (the events' account_id)
    ARGV[1] kind             "opening" | "topup" | "adjustment" | "migrate" (only the migration)
    ARGV[2] amount           integer micro-toman; |amount| <= ARGV[3]
    ARGV[3] max              integer micro-toman: the largest |balance| allowed (2^53)
    ARGV[4] ref              "" = none
    ARGV[5] record json      {"id", "ref", "note", "actor"}
    ARGV[6] migration json   the same for a migration's opening transaction
    ARGV[8] bank json        with KEYS[7]: {"ref_id", "card_pan"} from the gateway's verify

  Output: {code, balance, record}
    {0, balance, record}     applied
    {1, 0, ""}               unknown account: nothing written
    {2, balance, ""}         the new balance would pass +/- max: nothing written
    {3, balance, record}     replayed: this ref was used with this kind and amount (the first record)
    {4, balance, record}     conflict: this ref was used with another kind or amount (its record)
    {5, balance, ""}         KEYS[7] given and no such order: nothing written
    {6, balance, ""}         the order's amount or ref is not this credit's (or kind is not topup)
]]
local wallet, refs, txns = KEYS[1], KEYS[2], KEYS[3]
local kind, amount_text = ARGV[1], ARGV[2]
local amount, max = tonumber(ARGV[2]), tonumber(ARGV[3])
local ref, record_json, migration_json = ARGV[4], ARGV[5], ARGV[6]

if rcall('EXISTS', wallet) == 0 then
  return {1, 0, ''}
end
local now = clock_ms(0)
migrate(wallet, txns, now, migration_json)

local balance = tonumber(rcall('HGET', wallet, 'balance') or '0')
if kind == 'migrate' then
  return {0, balance, ''}
end

local order = KEYS[7]
if order then
  local o = rcall('HMGET', order, 'amount', 'ref')
  if not o[1] then
    return {5, balance, ''}
  end
  if kind ~= 'topup' or o[1] ~= amount_text or o[2] ~= ref or ref == '' then
    return {6, balance, ''}
  end
end

-- The order of a payment's credit becomes paid, once, with the first transaction's id.
local function order_paid(record)
  if not order or rcall('HGET', order, 'status') == 'paid' then
    return
  end
  local txn = cjson.decode(string.match(record, '^[^|]*|[^|]*|[^|]*|[^|]*|(.*)$'))
  local bank = cjson.decode(ARGV[8])
  rcall('HSET', order, 'status', 'paid', 'paid_ms', istr(now), 'transaction_id', txn.id,
        'ref_id', tostring(bank.ref_id or ''), 'card_pan', tostring(bank.card_pan or ''))
  rcall('HDEL', order, 'reason')
  emit_event(KEYS[4], KEYS[5], KEYS[6], ARGV[7], 'payment.succeeded',
             {account_id = ARGV[7], order_hash = rcall('HGETALL', order)}, now)
end

if ref ~= '' then
  local seen = rcall('HGET', refs, ref)
  if seen then
    local position, used = string.match(seen, '^(%d+)|(.*)$')
    local first = rcall('LINDEX', txns, tonumber(position) - 1)
    rcall('HSET', refs, ref, seen)
    if used == kind .. '|' .. amount_text then
      order_paid(first)
      return {3, balance, first}
    end
    return {4, balance, first}
  end
end

if kind == 'opening' and rcall('LLEN', txns) > 0 then
  return {3, balance, rcall('LINDEX', txns, 0)}
end

if (amount > 0 and balance > max - amount) or (amount < 0 and balance < -max - amount) then
  return {2, balance, ''}
end

local after = rcall('HINCRBY', wallet, 'balance', amount_text)
rcall('HINCRBY', wallet, 'credited', amount_text)
local record = istr(now) .. '|' .. kind .. '|' .. amount_text .. '|' .. istr(after) .. '|' .. record_json
local position = rcall('RPUSH', txns, record)
if ref ~= '' then
  rcall('HSET', refs, ref, istr(position) .. '|' .. kind .. '|' .. amount_text)
end
if kind == 'topup' or kind == 'adjustment' then
  emit_event(KEYS[4], KEYS[5], KEYS[6], ARGV[7], 'wallet.topup',
             {account_id = ARGV[7], transaction_record = record, balance_toman = toman(after)}, now)
  low_balance_check(wallet, KEYS[4], KEYS[5], KEYS[6], ARGV[7], now, amount > 0)
end
order_paid(record)
return {0, after, record}
