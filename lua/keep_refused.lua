--[[
  keep_refused.lua: keep the record of a request the gateway refused (a 4xx/5xx answered with
  an X-Svc-Request-Id after its key was known, that no hold's settle or release recorded): its
  code, route, model, key and time, never content. The account's refused records are a sorted set
  of their own, so a flood of refusals never pushes out what requests cost; they are filed in the
  same request index as every record, so a lookup by id finds them. Bounded: the newest ARGV[7]
  are kept, none older than the retention. Idempotent: the same record twice is one member.

  Input:
    KEYS[1] refused records (zset)   {a:<acct>}:refused
    ARGV[1] the record (compact JSON array, upgate/billing/request_record.py)
    ARGV[2] request id
    ARGV[3] account id
    ARGV[4] request index prefix     "reqidx:" (+ UTC day number), in the account's slot
    ARGV[5] now, ms
    ARGV[6] keep, ms (UPGATE_REQUEST_LOG_DAYS)
    ARGV[7] at most this many kept per account

  Output: 1
]]
keep_record(KEYS[1], ARGV[4], ARGV[3], ARGV[2], ARGV[1], tonumber(ARGV[5]), tonumber(ARGV[6]),
            tonumber(ARGV[7]))
return 1
