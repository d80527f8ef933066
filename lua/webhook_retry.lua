--[[
  webhook_retry.lua: an attempt failed (non-2xx, timeout, no connection): schedule the next one
  and take the entry off this consumer's pending list, in one step. The entry stays in the stream
  until it is finished (webhook_finish.lua); the schedule is what keeps it alive meanwhile.

  Input:
    KEYS[1] the stream                          {webhooks}:stream
    KEYS[2] retry schedule (zset, entry id → due ms)            {webhooks}:retry
    KEYS[3] attempts (hash, entry id → JSON of the attempts so far)   {webhooks}:attempts
    ARGV[1] consumer group
    ARGV[2] stream entry id
    ARGV[3] when the next attempt is due, ms
    ARGV[4] the attempts so far (JSON)

  Output: 1
]]
rcall('ZADD', KEYS[2], ARGV[3], ARGV[2])
rcall('HSET', KEYS[3], ARGV[2], ARGV[4])
rcall('XACK', KEYS[1], ARGV[1], ARGV[2])
return 1
