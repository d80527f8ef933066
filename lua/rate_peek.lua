#!lua flags=no-writes
--[[
  rate_peek.lua: read a key's rpm window for the X-RateLimit-* headers without counting
  anything (routes outside the rpm counter, and errors before admit). Writes nothing.

  Input:
    KEYS[1] rpm window (zset, member → ms)   {a:<acct>}:rpm:<key_id>
    KEYS[2] key record hash                  {a:<acct>}:key:<key_id>
    ARGV[1] now, ms; "0" = Redis TIME

  Output: {limit, remaining, reset_ms}
]]
local rpm_key, key_record = KEYS[1], KEYS[2]
local now = clock_ms(ARGV[1])

local limit = tonumber(rcall('HGET', key_record, 'rpm')) or RPM_DEFAULT
local used = rcall('ZCOUNT', rpm_key, '(' .. istr(now - RPM_WINDOW_MS), '+inf')
local remaining = limit - used
if remaining < 0 then
  remaining = 0
end
local reset_ms = now
if used > 0 then
  reset_ms = window_reset_ms(rpm_key, now)
end
return {limit, remaining, reset_ms}
