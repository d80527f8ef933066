--[[
  _lib.lua: helpers shared by the ledger scripts. Every script of lua/ is one function of a
  Redis Functions library that starts with this file (upgate/store/lua_library.py), so the helpers
  are built once, at FUNCTION LOAD, not on every call. A library's load step may not call
  redis.call: `rcall` is bound as each function starts. No KEYS or ARGV of its own.

  Conventions of every ledger script:
  - amounts are integer micro-toman, times integer milliseconds (Unix epoch);
  - the clock is Redis `TIME` unless a test injects a time (`now_ms` > 0);
  - a number handed to redis.call goes through `istr`: Lua 5.1 prints numbers with "%.14g",
    which would turn 123456789012345 into "1.2345678901234e+14" (and a Redis error);
  - per-hold key names (the key record, the free counter of the hold's day, the usage hash of
    the hold's day) are built here from prefixes that upgate/store/keyspace.py hands in as ARGV, the
    way BullMQ builds job keys: they all carry the account's hash tag, so they live in the slot
    of the declared KEYS and the script stays single-slot on Redis Cluster.
]]
local rcall -- redis.call (see above)

local RPM_WINDOW_MS = 60000 -- the spec's sliding minute
local RPM_DEFAULT = 60      -- a key without `rpm`

-- An integer as a decimal string, exact up to 2^53.
local function istr(n)
  return string.format('%d', n)
end

-- The time in ms: the injected one (tests) or Redis' own clock, so nodes never disagree.
local function clock_ms(injected)
  local n = tonumber(injected) or 0
  if n > 0 then
    return n
  end
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- An account from before transactions were recorded has no `credited` field: give it an honest
-- opening transaction equal to its balance now (an adjustment when negative; none when zero)
-- and start both lifetime counters there, so balance == credited - charged from now on.
-- `record_json`: the transaction's {"id", "ref", "note", "actor"} (upgate/services/transactions.py).
local function migrate(wallet, txns, now, record_json)
  if rcall('HEXISTS', wallet, 'credited') == 1 then
    return
  end
  local balance = rcall('HGET', wallet, 'balance') or '0'
  rcall('HSET', wallet, 'credited', balance, 'charged', '0')
  local n = tonumber(balance)
  if n ~= 0 then
    local kind = n > 0 and 'opening' or 'adjustment'
    rcall('RPUSH', txns, istr(now) .. '|' .. kind .. '|' .. balance .. '|' .. balance .. '|' .. record_json)
  end
end

-- Keep a request's record (settle.lua, release.lua, reap.lua): add it to the account's records
-- (sorted set by time), file its id in that UTC day's request index (a hash in the account's slot
-- whose name is index_prefix .. day number, expiring keep_ms after its day), and drop what is
-- past the retention: records older than keep_ms (the index days expire on their own) and, at
-- most 64 a call, the oldest beyond `max` with their index entries. `record` = "" keeps nothing.
-- The expiries and the age trim run once per account and UTC day: settle passes the wallet and
-- its `rec_day` field (read with the wallet anyway), and the day's first record marks it; so
-- does a record that finds the set new (emptied and made again the same day). A record is kept
-- keep_ms at least, and dropped by the account's first record of a later day once it is older;
-- the records expire keep_ms and a day after the day's first one, so after its last one too.
-- Three commands a request fewer, a third of what keeping a record costs a cold store. Without
-- `wallet` (release, reap: rare) every call does them.
local DAY_MS = 86400000

-- A reaped hold's record kept by settle/release is replaced by the request's full one.
-- `old`: the hold's `record` field when the caller read it already (false: it has none).
local function drop_reaped_record(hold_key, records, old)
  if old == nil then
    old = rcall('HGET', hold_key, 'record')
  end
  if old then
    rcall('ZREM', records, old)
  end
end
local function keep_record(records, index_prefix, account_id, request_id, record, now, keep_ms, max,
                           wallet, kept_day)
  if record == '' then
    return
  end
  local day = istr(math.floor(now / DAY_MS))
  local index = index_prefix .. day
  rcall('ZADD', records, istr(now), record)
  rcall('HSET', index, request_id, account_id .. '|' .. istr(now))
  local card = rcall('ZCARD', records)
  if kept_day ~= day or card == 1 then -- (1: the set is new, maybe emptied and made again today)
    rcall('PEXPIREAT', index, istr((tonumber(day) + 1) * DAY_MS + keep_ms))
    rcall('PEXPIRE', records, istr(keep_ms + DAY_MS))
    if rcall('ZREMRANGEBYSCORE', records, '-inf', '(' .. istr(now - keep_ms)) > 0 then
      card = rcall('ZCARD', records)
    end
    if wallet then
      rcall('HSET', wallet, 'rec_day', day)
    end
  end
  local over = card - max
  if over > 0 then
    for _, old in ipairs(rcall('ZRANGE', records, 0, math.min(over, 64) - 1)) do
      local id, t = string.match(old, '^%["([^"]*)",(%d+)')
      if id then
        rcall('HDEL', index_prefix .. istr(math.floor(tonumber(t) / DAY_MS)), id)
      end
      rcall('ZREM', records, old)
    end
  end
end

-- Release one OPEN hold and charge nothing: its amount leaves the wallet's and the key's
-- `held`, its stream slot is freed and it leaves the lease index. A `:free` hold may credit its
-- request back to the free counter of the day it was counted on (`credit` = true).
-- `final`: 'delete' drops the record (released); 'reaped' keeps it as state=reaped for
-- keep_ms so a late settle of a request that was in fact served can still charge it.
-- Returns the record fields {state, amount, key, free, stream, month, day, rid, model}; the
-- caller checks rec[1] == 'open' to know whether anything changed. A caller that read them
-- already (read_hold) passes them as `rec`, and may pass `key_live` (does the hold's key record
-- still exist?) when it knows: each redis.call costs about as much as a small command.
local function read_hold(hold_key)
  return rcall('HMGET', hold_key, 'state', 'amount', 'key', 'free', 'stream', 'month', 'day', 'rid', 'model',
               'record')
end

local function close_hold(wallet, hold_key, holds, streams, hold_id, key_prefix, free_prefix,
                          credit, final, keep_ms, rec, key_live)
  rec = rec or read_hold(hold_key)
  if rec[1] ~= 'open' then
    return rec
  end
  local amount = tonumber(rec[2]) or 0
  if amount ~= 0 then
    rcall('HINCRBY', wallet, 'held', istr(-amount))
    local key_record = key_prefix .. (rec[3] or '')
    if key_live == nil then
      key_live = rcall('EXISTS', key_record) == 1
    end
    if key_live then
      rcall('HINCRBY', key_record, 'held', istr(-amount))
    end
  end
  rcall('ZREM', holds, hold_id)
  if rec[5] == '1' then
    rcall('ZREM', streams, hold_id)
  end
  if credit and rec[4] == '1' and rec[7] then
    local counter = free_prefix .. rec[7]
    if (tonumber(rcall('GET', counter)) or 0) > 0 then
      rcall('DECR', counter)
    end
  end
  if final == 'reaped' then
    rcall('HSET', hold_key, 'state', 'reaped')
    rcall('PEXPIRE', hold_key, istr(keep_ms))
  else
    rcall('DEL', hold_key)
  end
  return rec
end

-- The X-RateLimit-Reset moment (ms): when the newest counted request leaves the window,
-- i.e. when the window is clear again; `now` when it is already empty.
local function window_reset_ms(rpm_key, now)
  local newest = rcall('ZRANGE', rpm_key, -1, -1, 'WITHSCORES')
  if newest[2] then
    return tonumber(newest[2]) + RPM_WINDOW_MS
  end
  return now
end

-- ---- cool-downs (a model's, lua/cooldown.lua; a route's, lua/route_health.lua) -------------
-- One more failure in a row: at `needed` of them the count starts again and a cold period of
-- `cold_ms` begins. Returns the new count, until_ms (0 = not cold) and 1 when this one made it cold.
local function strike(count, needed, cold_ms, now)
  count = count + 1
  if count >= needed then
    return 0, now + cold_ms, 1
  end
  return count, 0, 0
end

-- ---- webhook events ----------------------------------------------------------------------
local OUTBOX_MAX = 1000               -- an account's undelivered events waiting in its outbox; the
                                      -- mover moves the oldest beyond it to the failed list (overflow)
local OUTBOX_HARD_MAX = 10 * OUTBOX_MAX  -- only while no node moves them (webhooks off): beyond it
                                      -- the oldest go, counted in the state's `dropped`
local OUTBOX_TTL_MS = 7 * 86400000    -- an outbox nobody moves (webhooks off) goes away

-- Micro-toman as the API's decimal text with six fractional digits ("-12.500000").
local function toman(micro)
  local n = tonumber(micro) or 0
  local sign = ''
  if n < 0 then
    sign, n = '-', -n
  end
  return sign .. string.format('%d.%06d', math.floor(n / 1000000), n % 1000000)
end

-- Append one event to the account's outbox, in the same atomic step as the change it reports,
-- and file the account for the mover (upgate/webhooks/mover.py) unless its oldest event is
-- already out for delivery (then delivering that one takes the next: one at a time, in order).
-- The id is unique without a random source (scripts have none): 12 hex digits of the account's
-- id (a random UUID), the time in ms and the account's event count, all in hex.
-- `data` is a Lua table of the event's fields; upgate/webhooks/events.py fixes their order.
local function emit_event(outbox, state, index, account_id, event_type, data, now_ms)
  local seq = rcall('HINCRBY', state, 'seq', 1)
  local id = 'evt_' .. string.sub(string.gsub(account_id, '-', ''), 1, 12) .. string.format('%011x%x', now_ms, seq)
  local body = cjson.encode({id = id, type = event_type, created = math.floor(now_ms / 1000), data = data})
  local n = rcall('RPUSH', outbox, id .. ' ' .. body)
  if n > OUTBOX_HARD_MAX then
    rcall('LTRIM', outbox, -OUTBOX_HARD_MAX, -1)
    rcall('HINCRBY', state, 'dropped', n - OUTBOX_HARD_MAX)
  end
  rcall('PEXPIRE', outbox, istr(OUTBOX_TTL_MS))
  if n > OUTBOX_MAX or rcall('HEXISTS', state, 'sent') == 0 then -- over: the mover comes now
    rcall('ZADD', index, 'LT', istr(now_ms), account_id)
  end
  return id
end

-- wallet.low_balance, decided after a charge or a debit (settle.lua, the transaction step):
-- available = balance - held below the wallet's `low_balance` threshold (micro-toman; absent =
-- no alert) fires once. `low_fired` remembers the threshold it fired for, so changing the
-- threshold arms it again; money coming in (`credit` = true) that brings available back to the
-- threshold or above arms it again too. Hold churn never re-arms it: a busy account hovering at
-- its threshold would otherwise fire on every other request.
-- `w`: the wallet's {balance, held, low_balance, low_fired} when the caller read them already.
-- Returns 1 when it fired (the caller hands that on: the customer's SMS, upgate/alerts/), else 0.
local function low_balance_check(wallet, outbox, state, index, account_id, now_ms, credit, w)
  w = w or rcall('HMGET', wallet, 'balance', 'held', 'low_balance', 'low_fired')
  local threshold = w[3]
  if not threshold or threshold == '' then
    if w[4] then
      rcall('HDEL', wallet, 'low_fired') -- the alert was turned off: a new threshold starts armed
    end
    return
  end
  local balance = tonumber(w[1]) or 0
  local available = balance - (tonumber(w[2]) or 0)
  if available < tonumber(threshold) then
    if w[4] ~= threshold then
      rcall('HSET', wallet, 'low_fired', threshold)
      emit_event(outbox, state, index, account_id, 'wallet.low_balance',
                 {account_id = account_id, balance_toman = toman(balance), available_toman = toman(available),
                  low_balance_toman = toman(threshold)}, now_ms)
      return 1
    end
  elseif credit and w[4] then
    rcall('HDEL', wallet, 'low_fired')
  end
  return 0
end

-- key.monthly_limit_reached, once per key and Jalali month (a `limit_event:<month>` flag on the
-- key record), for a limit that spending reached: a settlement brings `spent` to it, or admit
-- refuses a request while the settled `spent` is at it already (the limit was lowered). A hold
-- too large for what is left is refused without it (nothing was spent reaching anything).
local function limit_reached(key_record, outbox, state, index, account_id, key_id, month, limit, spent, now_ms)
  if rcall('HSETNX', key_record, 'limit_event:' .. month, '1') == 0 then
    return
  end
  emit_event(outbox, state, index, account_id, 'key.monthly_limit_reached',
             {account_id = account_id, key_id = key_id, monthly_limit_toman = toman(limit),
              spent_toman = toman(spent)}, now_ms)
end
