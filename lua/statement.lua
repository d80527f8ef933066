#!lua flags=no-writes
--[[
  statement.lua: read, in one consistent snapshot, everything an account's statement needs:
  the wallet's balance and lifetime counters, its whole transaction log, and the charges and
  request counts of a run of Tehran days (the usage hashes settle.lua keeps). Writes nothing.
  Every key carries the account's hash tag, so the script runs in one slot on Redis Cluster;
  the usage keys are built from a prefix, as in settle.lua.

  Input:
    KEYS[1] wallet           hash {a:<acct>}:wallet
    KEYS[2] transaction log  list {a:<acct>}:txns
    ARGV[1] usage prefix     "{a:<acct>}:usage:" (+ a day "1405-09-02")
    ARGV[2..] days           Tehran days, oldest first

  Output: {exists, balance, credited, charged, transactions, days}
    exists        1, or 0 for an unknown account (then nothing else is read)
    balance, credited, charged   decimal text of micro-toman ("" when absent)
    transactions  the log's records, oldest first (see lua/credit.lua)
    days          flat {cost, requests, cost, requests, ...} in the order of ARGV[2..] ("" = none)
]]
local wallet, txns = KEYS[1], KEYS[2]
local usage_prefix = ARGV[1]

if rcall('EXISTS', wallet) == 0 then
  return {0, '', '', '', {}, {}}
end
local w = rcall('HMGET', wallet, 'balance', 'credited', 'charged')
local days = {}
for i = 2, #ARGV do
  -- the day's totals: the sum over its `model|<id>|cost` / `|requests` fields (settle.lua)
  local d = rcall('HGETALL', usage_prefix .. ARGV[i])
  local cost, requests = nil, nil
  for j = 1, #d, 2 do
    local f = d[j]
    if string.sub(f, 1, 6) == 'model|' then
      if string.sub(f, -5) == '|cost' then
        cost = (cost or 0) + tonumber(d[j + 1])
      elseif string.sub(f, -9) == '|requests' then
        requests = (requests or 0) + tonumber(d[j + 1])
      end
    end
  end
  days[#days + 1] = cost and string.format('%d', cost) or ''
  days[#days + 1] = requests and string.format('%d', requests) or ''
end
return {1, w[1] or '0', w[2] or '', w[3] or '', rcall('LRANGE', txns, 0, -1), days}
