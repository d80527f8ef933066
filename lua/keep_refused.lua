--[[
  keep_refused.lua: keep the record of a request the gateway refused (a 4xx/5xx answered with
  an X-Svc-Request-Id after its key was known, that no hold's settle or release recorded): its
  code, route, model, key and time, never content. The account's refused records are a list of
  their own, so a flood of refusals never pushes out what requests cost; they are packed and
  filed in the same request index as every record (keep_record, _lib.lua), so a lookup by id
  finds them. Bounded: the newest ARGV[7] are kept, none older than the retention.

  Input:
    KEYS[1] wallet hash                  {a:<acct>}:wallet   (ref_day, ref_gone)
    KEYS[2] refused records (list)       {a:<acct>}:rf
    ARGV[1] the record (request_record.pack)
    ARGV[2] the request id's key (request_record.rid_key)
    ARGV[3] the account id's key (request_record.acct_key)
    ARGV[4] request index prefix     "reqidx:" (+ UTC day number), in the account's slot
    ARGV[5] now, ms
    ARGV[6] keep, ms (UPGATE_REQUEST_LOG_DAYS)
    ARGV[7] at most this many kept per account

  Output: 1 kept, 0 not (no such account)
]]
if rcall('EXISTS', KEYS[1]) == 0 then
  return 0
end
keep_record(KEYS[2], ARGV[4], ARGV[3], ARGV[2], ARGV[1], tonumber(ARGV[5]), tonumber(ARGV[6]),
            tonumber(ARGV[7]), KEYS[1], nil, nil, nil, 'ref')
return 1
