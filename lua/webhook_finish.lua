--[[
  webhook_finish.lua: an event's delivery is over: acknowledged by the receiver (2xx), or given
  up after the retry window (then it is recorded in the failed list, newest first, which keeps
  at most `failed_max` entries). Either way the entry leaves the stream, the schedule and the
  attempts, so no node sends it again.

  Input:
    KEYS[1] the stream                          {webhooks}:stream
    KEYS[2] retry schedule (zset)               {webhooks}:retry
    KEYS[3] attempts (hash)                     {webhooks}:attempts
    KEYS[4] failed deliveries (list, JSON, newest first)   {webhooks}:failed
    ARGV[1] consumer group
    ARGV[2] stream entry id
    ARGV[3] the failed record (JSON), or "" when delivered
    ARGV[4] failed_max

  Output: {was, lost}: was = 1 when the entry was still in the stream, 0 when another node
  finished it first; lost = how many of the oldest failed entries the cap pushed out (the
  caller logs and counts them: nothing leaves the failed list unseen)
]]
local stream, retry, attempts, failed = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local entry = ARGV[2]
rcall('XACK', stream, ARGV[1], entry)
rcall('ZREM', retry, entry)
rcall('HDEL', attempts, entry)
local was = rcall('XDEL', stream, entry)
local lost = 0
if was == 1 and ARGV[3] ~= '' then
  local n = rcall('LPUSH', failed, ARGV[3])
  local cap = tonumber(ARGV[4])
  if n > cap then
    lost = n - cap
    rcall('LTRIM', failed, 0, cap - 1)
  end
end
return {was, lost}
