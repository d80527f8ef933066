--[[
  webhook_failed.lua: record events that will not be delivered without the operator (an outbox
  overflow) in the failed list, newest first, as webhook_finish.lua records a given-up
  delivery; `webhook resend` sends them again.

  Input:
    KEYS[1] failed deliveries (list, JSON, newest first)   {webhooks}:failed
    ARGV[1] failed_max
    ARGV[2..] the failed records (JSON)

  Output: how many older entries the list lost past failed_max (the caller logs and counts them)
]]
local failed = KEYS[1]
local max = tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV do
  n = rcall('LPUSH', failed, ARGV[i])
end
if n > max then
  rcall('LTRIM', failed, 0, max - 1)
  return n - max
end
return 0
