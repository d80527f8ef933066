--[[
  phone_set.lua: change the phone stored in one account's wallet, only if it still holds the
  phone the caller read (compare-and-set). Used by a phone change (upgate/services/phone_change.py,
  after the new phone's index entry is claimed) and by the phone migration (canonical spelling).
  Two changes of one account racing: the second finds the phone changed and writes nothing.

  Input:
    KEYS[1] wallet hash   {a:<acct>}:wallet
    ARGV[1] the phone expected there now (as stored; "" = none)
    ARGV[2] the new phone (canonical E.164)

  Output: 1 changed, 0 it already holds the new phone, -1 unknown account, -2 it holds another
  phone than ARGV[1] (nothing written)
]]
local wallet = KEYS[1]
if rcall('EXISTS', wallet) == 0 then
  return -1
end
local now = rcall('HGET', wallet, 'phone') or ''
if now == ARGV[2] then
  return 0
end
if now ~= ARGV[1] then
  return -2
end
rcall('HSET', wallet, 'phone', ARGV[2])
return 1
