#!lua flags=no-writes
--[[
  records_window.lua: an account's records (one list of keep_record's, _lib.lua: the billed or
  the refused ones) whose time is in [lo, hi): how many, and the newest `limit` of them. The list
  is in the order the records were written, which is their time order but for a settlement the
  journal replayed late: the bounds are found by binary search (LINDEX), about 2 × log2(length)
  reads. Writes nothing. (services/records.py count_window / account_window.)

  Input:
    KEYS[1] the records list     {a:<acct>}:rq | {a:<acct>}:rf
    ARGV[1] lo, ms (included)    ARGV[2] hi, ms (excluded)
    ARGV[3] at most this many records returned, newest last (0: only the count)

  Output: {count, record, ...}
]]
local list, lo, hi, limit = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])

local function first_at(len, t) -- the first place whose record's time is >= t
  local a, b = 0, len
  while a < b do
    local m = math.floor((a + b) / 2)
    local _, _, mt = rec_head(rcall('LINDEX', list, m))
    if mt < t then
      a = m + 1
    else
      b = m
    end
  end
  return a
end

local len = rcall('LLEN', list)
if len == 0 then
  return {0}
end
local a, b = first_at(len, lo), first_at(len, hi)
local out = {b - a}
if limit > 0 and b > a then
  for _, s in ipairs(rcall('LRANGE', list, math.max(a, b - limit), b - 1)) do
    out[#out + 1] = s
  end
end
return out
