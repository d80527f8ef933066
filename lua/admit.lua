--[[
  admit.lua: decide whether one billable request may go upstream and reserve what it needs,
  in one atomic step. In this order (the first failure answers; nothing is reserved then):
    0. the key exists, is not revoked and not expired; the account exists and is not suspended
       (the authority: the node's auth cache may be a few ms stale, this never is);
    1. the key's sliding 60 s rpm window: full → rate_limit_exceeded (not counted); otherwise
       the request IS counted, even when a later step refuses it (the spec counts every
       request that reaches the billable routes, rejected or not, except rpm's own rejections);
    2. stream = 1: an open stream slot of the ACCOUNT (slots whose lease lapsed do not count);
    3a. free = 1: one request against the account's free counter of this Tehran day;
    3b. paid: the key's monthly limit (spent this Jalali month + the key's open holds + this hold
        must stay within it), then the wallet (balance ≥ 0 and balance − held ≥ this hold);
    then the hold is placed: wallet.held and key.held grow by the hold, a hold record with a
    lease deadline is written and indexed for the reaper (and the stream slot taken).
  Idempotent by hold id: when the hold record already exists (this call was sent again after
  its reply was lost), nothing is checked or changed and the first admission is answered again
  (code 0 with the hold's amount and deadline; the rate values read from the window).

  Input:
    KEYS[1] wallet hash                         {a:<acct>}:wallet
    KEYS[2] key record hash                     {a:<acct>}:key:<key_id>
    KEYS[3] rpm window (zset, member → ms)      {a:<acct>}:rpm:<key_id>
    KEYS[4] stream slots (zset, hold id → lease deadline ms)   {a:<acct>}:streams
    KEYS[5] open holds (zset, hold id → lease deadline ms)     {a:<acct>}:holds
    KEYS[6] the new hold's record (hash)        {a:<acct>}:hold:<hold_id>
    KEYS[7] today's free counter (string int)   {a:<acct>}:free:<day>
    KEYS[8] the reaper's account index (zset, account id → earliest deadline ms)
    KEYS[9]  webhook outbox (list)        {a:<acct>}:outbox      (code 6 records
    KEYS[10] webhook outbox state (hash)  {a:<acct>}:outbox:state  key.monthly_limit_reached,
    KEYS[11] webhook outbox index (zset)  webhooks:outbox | whout:{<slot tag>}   once a month)
    ARGV[1]  hold id (unique; also the rpm member)
    ARGV[2]  hold amount, micro-toman (0 for free requests)
    ARGV[3]  stream: "1" takes a stream slot, "0" does not
    ARGV[4]  free: "1" counts against the free quota instead of placing money on hold
    ARGV[5]  Jalali month "YYYY-MM" (Tehran time) whose `spent:` field the limit reads
    ARGV[6]  Tehran day "YYYY-MM-DD" (recorded on the hold: free credit-back, usage day)
    ARGV[7]  lease, ms
    ARGV[8]  max open streams per account
    ARGV[9]  free requests per day when the wallet has no `free_quota`
    ARGV[10] free counter time-to-live, ms (longer than a day)
    ARGV[11] account id (the reaper index member)
    ARGV[12] key id (recorded on the hold)
    ARGV[13] now, ms; "0" = Redis TIME
    ARGV[14] request id ("" = none) and ARGV[15] the model asked for: recorded on the hold, so
             the reaper can leave a request record for a request whose node died

  Output: {code, limit, remaining, reset_ms, retry_after_ms, a, b, c}
    limit/remaining/reset_ms: the X-RateLimit-* values (0, 0, 0 for codes 1 and 2)
    code 0 ok                          a = hold amount, b = lease deadline ms, c = 0
                                       (also for a hold id admitted before: nothing changed)
    code 1 invalid_api_key
    code 2 account_suspended
    code 3 rate_limit_exceeded         retry_after_ms = until the oldest entry leaves the window
    code 4 too_many_concurrent_streams
    code 5 free_quota_exceeded         a = the day's quota, b = used
    code 6 key_monthly_limit_reached   a = monthly limit, b = spent (settled this month + key holds),
                                       c = this request's hold
    code 7 insufficient_balance        a = balance, b = wallet held, c = required hold
]]
local wallet, key_record, rpm_key, streams = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local holds, hold_key, free_key, reap_index = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local hold_id = ARGV[1]
local hold_micro = tonumber(ARGV[2])
local is_stream = ARGV[3] == '1'
local is_free = ARGV[4] == '1'
local month, day = ARGV[5], ARGV[6]
local lease_ms = tonumber(ARGV[7])
local max_streams = tonumber(ARGV[8])
local free_default = tonumber(ARGV[9])
local free_ttl_ms = ARGV[10]
local account_id, key_id = ARGV[11], ARGV[12]
local now = clock_ms(ARGV[13])

-- a hold id admitted before: answer that admission again and change nothing (a retried call
-- must never reserve twice, count twice in the window or take a second free request)
local seen = rcall('HMGET', hold_key, 'amount', 'deadline')
if seen[1] then
  local limit = tonumber(rcall('HGET', key_record, 'rpm')) or RPM_DEFAULT
  local counted_at = tonumber(rcall('ZSCORE', rpm_key, hold_id))
  local used, reset_ms
  if counted_at then -- as the first call saw it: the window up to its own entry, included
    used = rcall('ZCOUNT', rpm_key, '(' .. istr(counted_at - RPM_WINDOW_MS), istr(counted_at))
    reset_ms = counted_at + RPM_WINDOW_MS
  else
    used = rcall('ZCOUNT', rpm_key, '(' .. istr(now - RPM_WINDOW_MS), '+inf')
    reset_ms = window_reset_ms(rpm_key, now)
  end
  local remaining = limit - used
  if remaining < 0 then
    remaining = 0
  end
  return {0, limit, remaining, reset_ms, 0, tonumber(seen[1]) or 0, tonumber(seen[2]) or 0, 0}
end

-- 0. the authoritative key and account state
local k = rcall('HMGET', key_record, 'revoked', 'expires_at', 'rpm', 'monthly_limit', 'held',
                'spent:' .. month, 'account_id')
if k[7] ~= account_id or k[1] == '1' or (k[2] and tonumber(k[2]) <= now) then
  return {1, 0, 0, 0, 0, 0, 0, 0}
end
local w = rcall('HMGET', wallet, 'suspended', 'balance', 'held', 'free_quota')
if not w[2] then -- every wallet has a balance: no balance, no account
  return {1, 0, 0, 0, 0, 0, 0, 0}
end
if w[1] == '1' then
  return {2, 0, 0, 0, 0, 0, 0, 0}
end

-- 1. rpm: a sliding window of the counted requests' times; an entry at now - 60 s has left
local limit = tonumber(k[3]) or RPM_DEFAULT
rcall('ZREMRANGEBYSCORE', rpm_key, '-inf', istr(now - RPM_WINDOW_MS))
local used = rcall('ZCARD', rpm_key)
if used >= limit then
  local oldest = rcall('ZRANGE', rpm_key, 0, 0, 'WITHSCORES')
  local wait = oldest[2] and (tonumber(oldest[2]) + RPM_WINDOW_MS - now) or RPM_WINDOW_MS
  return {3, limit, 0, window_reset_ms(rpm_key, now), wait, 0, 0, 0}
end
rcall('ZADD', rpm_key, istr(now), hold_id)
rcall('PEXPIRE', rpm_key, istr(RPM_WINDOW_MS + 1000))
local remaining = limit - used - 1
if remaining < 0 then
  remaining = 0
end
local reset_ms = now + RPM_WINDOW_MS -- this request is the newest entry

-- 2. a stream slot of the account (slots past their lease are the reaper's, not counted)
if is_stream and rcall('ZCOUNT', streams, '(' .. istr(now), '+inf') >= max_streams then
  return {4, limit, remaining, reset_ms, 5000, 0, 0, 0}
end

if is_free then
  -- 3a. the account's free requests of this Tehran day
  local quota = tonumber(w[4]) or free_default
  local taken = tonumber(rcall('GET', free_key)) or 0
  if taken >= quota then
    return {5, limit, remaining, reset_ms, 3600000, quota, taken, 0}
  end
  rcall('INCR', free_key)
  rcall('PEXPIRE', free_key, free_ttl_ms)
  hold_micro = 0
else
  -- 3b. the key's monthly limit, then the wallet
  if k[4] then
    local monthly = tonumber(k[4])
    local spent = (tonumber(k[6]) or 0) + (tonumber(k[5]) or 0)
    if spent + hold_micro > monthly then
      -- the event is for a limit that spending reached (settled this month), not for a hold
      -- too large for what is left: that refusal stays silent, and the real crossing (in
      -- settle.lua, or here once settled spending is at the limit) is announced once
      local settled = tonumber(k[6]) or 0
      if settled >= monthly then
        limit_reached(key_record, KEYS[9], KEYS[10], KEYS[11], account_id, key_id, month, monthly, settled, now)
      end
      return {6, limit, remaining, reset_ms, 0, monthly, spent, hold_micro}
    end
  end
  local balance = tonumber(w[2]) or 0
  local held = tonumber(w[3]) or 0
  if balance < 0 or balance - held < hold_micro then
    return {7, limit, remaining, reset_ms, 0, balance, held, hold_micro}
  end
  if hold_micro > 0 then
    rcall('HINCRBY', wallet, 'held', ARGV[2])
    rcall('HINCRBY', key_record, 'held', ARGV[2])
  end
end

-- the hold record, leased, and indexed so the reaper finds it if this request's node dies
local deadline = now + lease_ms
if ARGV[14] ~= '' then -- (one HSET either way: each redis.call costs as much as a small command)
  rcall('HSET', hold_key, 'state', 'open', 'amount', istr(hold_micro), 'key', key_id,
        'free', is_free and '1' or '0', 'stream', is_stream and '1' or '0',
        'month', month, 'day', day, 'deadline', istr(deadline), 'rid', ARGV[14], 'model', ARGV[15])
else
  rcall('HSET', hold_key, 'state', 'open', 'amount', istr(hold_micro), 'key', key_id,
        'free', is_free and '1' or '0', 'stream', is_stream and '1' or '0',
        'month', month, 'day', day, 'deadline', istr(deadline))
end
rcall('ZADD', holds, istr(deadline), hold_id)
if is_stream then
  rcall('ZADD', streams, istr(deadline), hold_id)
end
rcall('ZADD', reap_index, 'LT', istr(deadline), account_id) -- LT: keep an earlier deadline
return {0, limit, remaining, reset_ms, 0, hold_micro, deadline, 0}
