--[[
  release.lua: the request was not served (provider error, nothing came back): charge nothing,
  give the hold back, free the stream slot, keep the request's record (no content) and, for a `:free` request the provider never
  served, credit the request back to the free counter of the day it was counted on.
  Idempotent by hold id: a settled or released hold has no record any more, so a second call
  changes nothing. A hold the reaper already released is only forgotten.

  Input:
    KEYS[1] wallet hash                  {a:<acct>}:wallet
    KEYS[2] the hold's record (hash)     {a:<acct>}:hold:<hold_id>
    KEYS[3] open holds (zset)            {a:<acct>}:holds
    KEYS[4] stream slots (zset)          {a:<acct>}:streams
    KEYS[5] request records (list)       {a:<acct>}:rq
    ARGV[1] hold id
    ARGV[2] credit a free request back: "1" / "0"
    ARGV[3] key-record prefix    "{a:<acct>}:key:"  (+ the hold's key id)
    ARGV[4] free-counter prefix  "{a:<acct>}:free:" (+ the hold's Tehran day)
    ARGV[5..11] the request's record, as settle.lua's ARGV[10..16]; kept when this call closes
                an open or reaped hold

  Output: {code, balance, wallet_held}
    code 1  released an open hold
    code 0  nothing changed: unknown, already settled, released or reaped
]]
local wallet, hold_key, holds, streams, records = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local hold_id, credit = ARGV[1], ARGV[2] == '1'
local key_prefix, free_prefix = ARGV[3], ARGV[4]

local function record(reaped)
  keep_record(records, ARGV[8], ARGV[7], ARGV[6], ARGV[5], tonumber(ARGV[9]), tonumber(ARGV[10]),
              tonumber(ARGV[11]), wallet, nil, nil, reaped)
end

local rec = close_hold(wallet, hold_key, holds, streams, hold_id, key_prefix, free_prefix,
                       credit, 'delete', 0)
if rec[1] ~= 'open' then
  if rec[1] == 'reaped' then
    rcall('DEL', hold_key) -- no settle will follow a release
    record(rec[10]) -- replaces the reaper's record
  end
  return {0, 0, 0}
end
record()
local w = rcall('HMGET', wallet, 'balance', 'held')
return {1, tonumber(w[1]) or 0, tonumber(w[2]) or 0}
