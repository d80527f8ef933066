--[[
  signin_rate.lua: count one ask in a sliding window, or refuse when the window is full (then
  nothing is counted). Sign-in codes per client address; also the payment gateway calls per
  account and per address (upgate/payments/bounds.py).

  Input:
    KEYS[1] the window's log (zset)   {signin:<address>}:sent, {a:<acct>}:payment_asks, …
    ARGV[1] asks per window (20)
    ARGV[2] the window, ms (3600000)
    ARGV[3] a unique member for this ask (random hex)
    ARGV[4] now, ms; "0" = Redis TIME

  Output: {status, wait_ms}: status 0 counted, 1 the window is full (wait_ms until a slot frees)
]]
local sent_key = KEYS[1]
local cap, window_ms, member = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local now = clock_ms(ARGV[4])

rcall('ZREMRANGEBYSCORE', sent_key, '-inf', istr(now - window_ms))
if rcall('ZCARD', sent_key) >= cap then
  local oldest = rcall('ZRANGE', sent_key, 0, 0, 'WITHSCORES')
  return {1, tonumber(oldest[2]) + window_ms - now}
end
rcall('ZADD', sent_key, now, member)
rcall('PEXPIRE', sent_key, window_ms)
return {0, 0}
