--[[
  renew.lua: a live request's node extends the lease of its open holds (and their stream
  slots) to now + lease, so the reaper leaves them alone. Holds that are no longer open (the
  reaper released them after a stall longer than the lease, or they were settled or released)
  are skipped and named in the reply, so the node can act on requests it no longer holds
  money for. The reaper index may keep an earlier deadline for the account: the reaper then
  looks early, finds nothing due and re-files the account (see reap.lua).

  Input:
    KEYS[1] open holds (zset, hold id → lease deadline ms)     {a:<acct>}:holds
    KEYS[2] stream slots (zset, hold id → lease deadline ms)   {a:<acct>}:streams
    ARGV[1] lease, ms
    ARGV[2] now, ms; "0" = Redis TIME
    ARGV[3] hold-record prefix   "{a:<acct>}:hold:"
    ARGV[4..] hold ids

  Output: the hold ids of ARGV[4..] that were NOT renewed (not open: reaped, closed or unknown),
          in ARGV order; an empty array when every hold was renewed
]]
local holds, streams = KEYS[1], KEYS[2]
local lease_ms = tonumber(ARGV[1])
local now = clock_ms(ARGV[2])
local hold_prefix = ARGV[3]
local deadline = istr(now + lease_ms)

local lost = {}
for i = 4, #ARGV do
  local hold_id = ARGV[i]
  local hold_key = hold_prefix .. hold_id
  local rec = rcall('HMGET', hold_key, 'state', 'stream')
  if rec[1] == 'open' then
    rcall('HSET', hold_key, 'deadline', deadline)
    rcall('ZADD', holds, 'XX', deadline, hold_id)
    if rec[2] == '1' then
      rcall('ZADD', streams, 'XX', deadline, hold_id)
    end
  else
    lost[#lost + 1] = hold_id
  end
end
return lost
