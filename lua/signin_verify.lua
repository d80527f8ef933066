--[[
  signin_verify.lua: try a code against a phone's current one. Every try counts, the right
  one too; past the limit even the right code is refused. A right code is consumed (deleted),
  so it signs in once. The digests are compared over their whole length whatever differs
  (no early exit), so the time taken says nothing about how much of a guess was right.

  Input:
    KEYS[1] the phone's code hash   {p:<E.164>}:code
    ARGV[1] digest of the code tried (HMAC hex)
    ARGV[2] tries allowed (5)
    ARGV[3] now, ms; "0" = Redis TIME

  Output: {status, tries_left}
    status 0 right: signed in (the code is gone)
    status 1 wrong (tries_left after this one)
    status 2 no code, or it expired
    status 3 too many tries: this code is dead whatever was typed
]]
local code_key = KEYS[1]
local tried, max_tries = ARGV[1], tonumber(ARGV[2])
local now = clock_ms(ARGV[3])

local stored = rcall('HMGET', code_key, 'digest', 'expires_ms', 'tries')
local digest, expires = stored[1], tonumber(stored[2])
if not digest or not expires or now >= expires then
  return {2, 0}
end
local tries = rcall('HINCRBY', code_key, 'tries', 1)
if tries > max_tries then
  return {3, 0}
end
local differ = 0
if #digest ~= #tried then
  differ = 1
end
for i = 1, #tried do
  local a, b = string.byte(tried, i), string.byte(digest, i) or 0
  if a ~= b then
    differ = differ + 1
  end
end
if differ == 0 then
  rcall('DEL', code_key)
  return {0, max_tries - tries}
end
return {1, max_tries - tries}
