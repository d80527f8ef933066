--[[
  rate_count.lua: count one request of a route that places no hold (count_tokens) in the key's
  sliding 60 s rpm window, the same window admit.lua counts in, or refuse it when the window is
  full (then nothing is counted). No money moves.

  Input:
    KEYS[1] rpm window (zset, member → ms)   {a:<acct>}:rpm:<key_id>
    KEYS[2] key record hash                  {a:<acct>}:key:<key_id>
    ARGV[1] a unique member for this request (its request id)
    ARGV[2] now, ms; "0" = Redis TIME

  Output: {status, limit, remaining, reset_ms, retry_after_ms}
    status 0 counted, 3 the window is full (as admit.lua's rate_limit_exceeded)
]]
local rpm_key, key_record = KEYS[1], KEYS[2]
local member = ARGV[1]
local now = clock_ms(ARGV[2])

local limit = tonumber(rcall('HGET', key_record, 'rpm')) or RPM_DEFAULT
rcall('ZREMRANGEBYSCORE', rpm_key, '-inf', istr(now - RPM_WINDOW_MS))
local used = rcall('ZCARD', rpm_key)
if used >= limit then
  local oldest = rcall('ZRANGE', rpm_key, 0, 0, 'WITHSCORES')
  local wait = oldest[2] and (tonumber(oldest[2]) + RPM_WINDOW_MS - now) or RPM_WINDOW_MS
  return {3, limit, 0, window_reset_ms(rpm_key, now), wait}
end
rcall('ZADD', rpm_key, istr(now), member)
rcall('PEXPIRE', rpm_key, istr(RPM_WINDOW_MS + 1000))
return {0, limit, limit - used - 1, window_reset_ms(rpm_key, now), 0}
