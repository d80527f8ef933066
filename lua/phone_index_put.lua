--[[
  phone_index_put.lua: write one phone's entry in the index phone -> account as the phone
  migration found it in the wallets (upgate/migrations/steps.py): one account -> its id; several
  -> "*" with the accounts in the shared set (nobody signs in with it until a phone change
  resolves it). Another account's live entry is never overwritten unless the caller checked it is
  stale (its account no longer holds the phone) and names it in ARGV[1].

  Input:
    KEYS[1] owner (string)    {p:<phone>}:account
    KEYS[2] sharers (set)     {p:<phone>}:shared
    ARGV[1] the entry the caller found stale ("" = none)
    ARGV[2..] the accounts whose wallets hold this phone (at least one)

  Output: 0 already so, 1 written, or the other account's id found there (nothing written)
]]
local owner_key, shared_key, stale = KEYS[1], KEYS[2], ARGV[1]
local cur = rcall('GET', owner_key)
if #ARGV == 2 then
  local owner = ARGV[2]
  if cur == owner then
    return 0
  end
  if cur and cur ~= '*' and cur ~= stale then
    return cur
  end
  rcall('SET', owner_key, owner)
  rcall('DEL', shared_key)
  return 1
end
if cur == '*' and rcall('SCARD', shared_key) == #ARGV - 1 then
  local same = true
  for i = 2, #ARGV do
    if rcall('SISMEMBER', shared_key, ARGV[i]) == 0 then
      same = false
    end
  end
  if same then
    return 0
  end
end
rcall('SET', owner_key, '*')
rcall('DEL', shared_key)
for i = 2, #ARGV do
  rcall('SADD', shared_key, ARGV[i])
end
return 1
