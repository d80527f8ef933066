--[[
  signin_issue.lua: issue a phone's sign-in code, within the resend gap and the hourly cap.
  Nothing is written when either refuses. Unknown phones run this too, with a digest that can
  never match (the caller's "!"), so known and unknown phones are throttled alike.

  Input:
    KEYS[1] the phone's code hash        {p:<E.164>}:code   (digest, expires_ms, tries)
    KEYS[2] the phone's sent log (zset)   {p:<E.164>}:sent   (score: sent at, ms; member: ARGV[7])
    ARGV[1] digest of the new code (HMAC hex, or "!" for a code that never verifies)
    ARGV[2] the code's life, ms (120000)
    ARGV[3] the resend gap, ms (60000)
    ARGV[4] codes per phone per window (5)
    ARGV[5] the window, ms (3600000)
    ARGV[6] now, ms; "0" = Redis TIME
    ARGV[7] a unique member for this send (random hex): two sends in one millisecond count twice

  Output: {status, wait_ms}
    status 0 issued (wait_ms = the resend gap)
    status 1 too soon after the last code (wait_ms until the gap ends)
    status 2 the hourly cap is reached (wait_ms until the oldest code leaves the window)
]]
local code_key, sent_key = KEYS[1], KEYS[2]
local digest, life_ms, gap_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local cap, window_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
local now = clock_ms(ARGV[6])

rcall('ZREMRANGEBYSCORE', sent_key, '-inf', istr(now - window_ms))
local last = rcall('ZREVRANGE', sent_key, 0, 0, 'WITHSCORES')
if last[2] ~= nil and now - tonumber(last[2]) < gap_ms then
  return {1, gap_ms - (now - tonumber(last[2]))}
end
if rcall('ZCARD', sent_key) >= cap then
  local oldest = rcall('ZRANGE', sent_key, 0, 0, 'WITHSCORES')
  return {2, tonumber(oldest[2]) + window_ms - now}
end
rcall('ZADD', sent_key, now, ARGV[7])
rcall('PEXPIRE', sent_key, window_ms)
rcall('DEL', code_key)
rcall('HSET', code_key, 'digest', digest, 'expires_ms', istr(now + life_ms), 'tries', 0)
rcall('PEXPIRE', code_key, life_ms)
return {0, gap_ms}
