--[[
  Top up one account's wallet, or adjust it (a negative amount), atomically; refuse any
  result beyond +/- 2^53 micro-toman, the largest integer a Lua number (a double) holds exactly.

  The range test never forms balance + amount: every operand it uses is within 2^53, so each
  comparison is exact. The write itself is HINCRBY on the decimal text from ARGV, done by
  Redis in 64-bit integers.

  Input:
    KEYS[1] wallet   hash {a:<account>}:wallet (field `balance`, integer micro-toman)
    ARGV[1] amount   integer micro-toman, non-zero, may be negative; |amount| <= ARGV[2]
    ARGV[2] max      integer micro-toman: the largest |balance| allowed (2^53)

  Output: {code, balance}
    {0, new_balance}   applied
    {1, 0}             unknown account (no wallet hash): nothing written
    {2, balance}       the new balance would pass +/- max: nothing written, balance unchanged
]]
local rcall = redis.call

local wallet = KEYS[1]
local amount_text = ARGV[1]
local amount = tonumber(ARGV[1])
local max = tonumber(ARGV[2])

if rcall('EXISTS', wallet) == 0 then
  return {1, 0}
end

local balance = tonumber(rcall('HGET', wallet, 'balance') or '0')

if (amount > 0 and balance > max - amount) or (amount < 0 and balance < -max - amount) then
  return {2, balance}
end

return {0, rcall('HINCRBY', wallet, 'balance', amount_text)}
