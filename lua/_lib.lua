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

-- ---- request records (the stored form: upgate/billing/request_record.py) -------------------
-- Keep a request's record: push it on the account's records list (oldest first) and file its
-- id in that UTC day's request index, then drop what is past the retention.
-- The index is listpack-sized hash buckets, so an entry costs ~35 bytes, not ~110 as in one
-- big hash per day: the day's n-th entry goes to bucket `width(n)`:`h % 2^width`, h from the
-- id's last three bytes, and the width grows with the day's count (`<index day>:n`), so a
-- bucket holds ~32 entries at any volume; a lookup tries each width up to the day's.
-- An entry is "<seq>|<account key>": the record's place in the list counted since the
-- account's first record (`rec_gone`, on the wallet, counts those dropped from its head).
-- Records go by age once per account and UTC day (the wallet's `rec_day`; or when the list is
-- new), and by count on every write (the oldest beyond `max`, with their index entries). The
-- list expires keep_ms and a day after the day's first record; index days keep_ms after the day.
local DAY_MS = 86400000
local REC_BUCKET = 64

local function rec_width(count)
  local w, q = 0, math.floor((count - 1) / REC_BUCKET)
  while q > 0 and w < 24 do
    w, q = w + 1, math.floor(q / 2)
  end
  return w
end

local function rec_bucket(index_day, rid, w)
  local a, b, c = string.byte(rid, -3, -1)
  local h = ((a or 0) * 65536 + (b or 0) * 256 + (c or 0)) % (2 ^ w)
  return index_day .. ':' .. w .. ':' .. istr(h)
end

-- a stored record's index width, id key and time
local function rec_head(s)
  local f = string.byte(s, 1)
  local rid, p
  if f % 64 >= 32 then
    rid, p = string.sub(s, 2, 13), 14
  else
    local n = string.byte(s, 2)
    rid, p = string.sub(s, 3, 2 + n), 3 + n
  end
  if f >= 128 then -- a packed key id
    p = p + 8
  end
  local t = 0
  for i = p, p + 5 do
    t = t * 256 + (string.byte(s, i) or 0)
  end
  return f % 32, rid, t
end

-- the record with index width w in its first byte
local function rec_with_width(record, w)
  local f = string.byte(record, 1)
  return string.char(f - f % 32 + w) .. string.sub(record, 2)
end

-- the id and account keys the Python side makes (request_record.rid_key / acct_key), for a
-- record built here (reap.lua)
local function rid_key(rid)
  if #rid == 28 and string.match(rid, '^req_[0-9a-f]+$') then
    return (string.gsub(string.sub(rid, 5), '..', function(h) return string.char(tonumber(h, 16)) end))
  end
  return string.sub(rid, 1, 255)
end
local function acct_key(acct)
  if #acct == 36 and string.match(acct, '^%x+%-%x+%-%x+%-%x+%-%x+$') and acct == string.lower(acct) then
    return (string.gsub(string.gsub(acct, '-', ''), '..', function(h) return string.char(tonumber(h, 16)) end))
  end
  return acct
end

-- a record in the stored form, for a request id (text), a time (ms) and the body's fields
local function rec_pack(rid, at, fields)
  local k, head = rid_key(rid), nil
  if #k == 12 and #rid == 28 then
    head = string.char(96) .. k
  else
    head = string.char(64, #k) .. k
  end
  local t = {}
  for i = 6, 1, -1 do
    t[i] = string.char(at % 256)
    at = math.floor(at / 256)
  end
  return head .. table.concat(t) .. table.concat(fields, '\031')
end

-- A reaped request's record (reap.lua put its list place on the hold) is replaced in place by
-- the request's full one. `seq`: the hold's `record` field; a hold reaped by a version before
-- the packed form holds the old record itself, which leaves the old sorted set. True: replaced.
local function replace_reaped(records, seq, rid, record, gone)
  local n = tonumber(seq)
  if not n then
    if seq then
      rcall('ZREM', string.sub(records, 1, -3) .. 'reqs', seq)
    end
    return false
  end
  local pos = n - gone - 1
  local old = pos >= 0 and rcall('LINDEX', records, pos)
  if not old then
    return false
  end
  local w, orid = rec_head(old)
  if orid ~= rid then
    return false
  end
  rcall('LSET', records, pos, rec_with_width(record, w))
  return true
end

-- `rid`, `acct`: request_record.rid_key / acct_key. `kept_day`, `gone`: the wallet's `rec_day`
-- and `rec_gone` when the caller read the wallet already (nil: read here). `reaped`: the
-- hold's `record` field when it was reaped. `kind`: 'ref' for the refused records' list (its
-- own `ref_day`/`ref_gone`; its index entries start with "r"), else the billed one.
-- Returns the record's seq ('' when nothing kept).
local function keep_record(records, index_prefix, acct, rid, record, now, keep_ms, max,
                           wallet, kept_day, gone, reaped, kind)
  if record == '' then
    return ''
  end
  kind = kind or 'rec'
  if kept_day == nil then
    local v = rcall('HMGET', wallet, kind .. '_day', kind .. '_gone')
    kept_day, gone = v[1], v[2]
  end
  gone = tonumber(gone) or 0
  if reaped and replace_reaped(records, reaped, rid, record, gone) then
    return ''
  end
  local day = math.floor(now / DAY_MS)
  local index_day = index_prefix .. istr(day)
  local until_ms = istr((day + 1) * DAY_MS + keep_ms)
  local count = rcall('INCR', index_day .. ':n')
  if count == 1 then
    rcall('PEXPIREAT', index_day .. ':n', until_ms)
  end
  local w = rec_width(count)
  local bucket = rec_bucket(index_day, rid, w)
  local len = rcall('RPUSH', records, rec_with_width(record, w))
  local seq = istr(gone + len)
  rcall('HSET', bucket, rid, (kind == 'ref' and 'r' or '') .. seq .. '|' .. acct)
  rcall('PEXPIREAT', bucket, until_ms)
  local dropped = 0
  if kept_day ~= istr(day) or len == 1 then -- (1: the list is new, maybe emptied and made again today)
    rcall('PEXPIRE', records, istr(keep_ms + DAY_MS))
    local cut, n = now - keep_ms, 0
    while n < len do -- the oldest first; the index days expire on their own
      local head, older = rcall('LRANGE', records, n, n + 127), 0
      for _, s in ipairs(head) do
        local _, _, t = rec_head(s)
        if t >= cut then
          break
        end
        older = older + 1
      end
      n = n + older
      if older < #head or #head == 0 then
        break
      end
    end
    if n > 0 then
      rcall('LTRIM', records, n, -1)
      dropped, len = n, len - n
    end
    rcall('HSET', wallet, kind .. '_day', istr(day))
  end
  local over = len - max
  if over > 0 then
    for _, old in ipairs(rcall('LPOP', records, math.min(over, 64))) do
      local ow, orid, ot = rec_head(old)
      rcall('HDEL', rec_bucket(index_prefix .. istr(math.floor(ot / DAY_MS)), orid, ow), orid)
      dropped = dropped + 1
    end
  end
  if dropped > 0 then
    rcall('HSET', wallet, kind .. '_gone', istr(gone + dropped))
  end
  return seq
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
