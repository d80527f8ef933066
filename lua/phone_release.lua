--[[
  phone_release.lua: an account lets go of a phone in the index phone -> account (the last step
  of a phone change, upgate/services/phone_change.py). Only the account's own entry is dropped
  (compare-and-delete: another account's claim is never touched). A phone shared by several
  accounts from before the index ("*", with its accounts in the shared set, written by the phone
  migration) loses this account from the set; when one account is left it becomes that
  account's again, so resolving a shared phone needs no second step.

  Input:
    KEYS[1] owner (string)     {p:<phone>}:account   account id, or "*"
    KEYS[2] sharers (set)      {p:<phone>}:shared    account ids sharing the phone
    ARGV[1] account id

  Output: 1 released, 2 left a shared phone, 0 the phone was not this account's
]]
local owner_key, shared_key, account_id = KEYS[1], KEYS[2], ARGV[1]
local owner = rcall('GET', owner_key)
if owner == account_id then
  rcall('DEL', owner_key)
  return 1
end
if owner ~= '*' then
  return 0
end
rcall('SREM', shared_key, account_id)
local left = rcall('SMEMBERS', shared_key)
if #left == 1 then
  rcall('SET', owner_key, left[1])
  rcall('DEL', shared_key)
elseif #left == 0 then
  rcall('DEL', owner_key)
end
return 2
