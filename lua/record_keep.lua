--[[
  record_keep.lua: keep one request record that no hold closes: a request refused before or at
  its admission (upgate/billing/request_record.py keep_call builds this call). The same
  keep_record (_lib.lua) as settle.lua's, so the same packed form, index and retention.
  Changes no money.

  Input:
    KEYS[1] wallet hash                  {a:<acct>}:wallet   (rec_day, rec_gone)
    KEYS[2] request records (list)       {a:<acct>}:rq
    ARGV[1] the record (request_record.encode)
    ARGV[2] the request id's key (request_record.rid_key)
    ARGV[3] the account id's key (request_record.acct_key)
    ARGV[4] request-index prefix (+ UTC day number)   "reqidx:" or "reqidx:{<slot tag>}:"
    ARGV[5] the record's time, ms ("0" = Redis TIME)
    ARGV[6] how long records are kept, ms
    ARGV[7] at most this many records per account

  Output: 1 kept, 0 not (no such account)
]]
if rcall('EXISTS', KEYS[1]) == 0 then
  return 0
end
keep_record(KEYS[2], ARGV[4], ARGV[3], ARGV[2], ARGV[1], clock_ms(ARGV[5]), tonumber(ARGV[6]),
            tonumber(ARGV[7]), KEYS[1])
return 1
