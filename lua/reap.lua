--[[
  reap.lua: release, charging nothing, every hold of one account whose lease deadline has
  passed: what a crashed or stalled gateway node left behind (its stream slots too). Then
  re-file the account in the reaper's index under its earliest remaining deadline, or take it
  out when no hold is left. Safe to run concurrently on every node: each run is atomic, and a
  second run finds nothing more to do. Because admit adds the account to the index in the same
  atomic step as a hold (and this script is the only one that removes it, after checking), a
  hold can never be outside the index.
  A reaped hold keeps its record (state=reaped) for keep_ms, so a settlement that arrives late
  (a stalled node, the journal) still charges a request that was served.

  Input:
    KEYS[1] wallet hash                  {a:<acct>}:wallet
    KEYS[2] open holds (zset, hold id → lease deadline ms)     {a:<acct>}:holds
    KEYS[3] stream slots (zset, hold id → lease deadline ms)   {a:<acct>}:streams
    KEYS[4] the reaper's account index (zset, account id → earliest deadline ms)
    KEYS[5] request records (list)       {a:<acct>}:rq
    ARGV[1] account id
    ARGV[2] now, ms; "0" = Redis TIME
    ARGV[3] hold-record prefix   "{a:<acct>}:hold:"
    ARGV[4] key-record prefix    "{a:<acct>}:key:"
    ARGV[5] how long a reaped hold's record is kept, ms
    ARGV[6] at most this many holds per call (the rest stays indexed as due)
    ARGV[7] request-index prefix, ARGV[8] records kept, ms, ARGV[9] at most this many records
            (as settle.lua's ARGV[13], [15], [16])

  A released hold that names its request (admit's request id) leaves a request record: status
  null, code "reaped", cost 0, hold amount; a late settle or release replaces it.

  Output: {released, next_deadline_ms}   next_deadline_ms = 0 when no hold is left
]]
local wallet, holds, streams, reap_index, records = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local account_id = ARGV[1]
local now = clock_ms(ARGV[2])
local hold_prefix, key_prefix = ARGV[3], ARGV[4]
local keep_ms = tonumber(ARGV[5])
local batch = tonumber(ARGV[6])

local released = 0
local due = rcall('ZRANGEBYSCORE', holds, '-inf', istr(now), 'LIMIT', 0, batch)
for _, hold_id in ipairs(due) do
  local rec = close_hold(wallet, hold_prefix .. hold_id, holds, streams, hold_id, key_prefix, '',
                         false, 'reaped', keep_ms)
  if rec[1] == 'open' then
    released = released + 1
    if rec[8] then
      local at = clock_ms(0) -- the record's time is Redis' own even when a test injects `now`
      local record = rec_pack(rec[8], at, {rec[3] or '', '', rec[9] or '', '', '', rec[5] == '1' and '1' or '',
                                           '-', 'reaped', '', '', '', rec[2] or '', '', '', ''})
      local seq = keep_record(records, ARGV[7], acct_key(account_id), rid_key(rec[8]), record, at,
                              tonumber(ARGV[8]), tonumber(ARGV[9]), wallet)
      rcall('HSET', hold_prefix .. hold_id, 'record', seq) -- where a late settlement replaces it
    end
  else
    rcall('ZREM', holds, hold_id) -- an index entry without an open record: drop it
    rcall('ZREM', streams, hold_id)
  end
end
-- a slot whose lease lapsed without an open hold behind it
rcall('ZREMRANGEBYSCORE', streams, '-inf', istr(now))

local first = rcall('ZRANGE', holds, 0, 0, 'WITHSCORES')
if first[2] then
  rcall('ZADD', reap_index, first[2], account_id)
  return {released, tonumber(first[2])}
end
rcall('ZREM', reap_index, account_id)
return {released, 0}
