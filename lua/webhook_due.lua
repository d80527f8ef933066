--[[
  webhook_due.lua: take the retries that are due, each for a lease: its schedule moves to
  now + lease_ms, so a node that dies mid-attempt leaves it to another node once the lease runs
  out, and no two nodes attempt it at once. A scheduled entry no longer in the stream (finished
  elsewhere) is dropped.

  Input:
    KEYS[1] the stream                          {webhooks}:stream
    KEYS[2] retry schedule (zset, entry id → due ms)   {webhooks}:retry
    KEYS[3] attempts (hash)                     {webhooks}:attempts
    ARGV[1] now, ms
    ARGV[2] lease, ms
    ARGV[3] at most this many

  Output: a flat list {entry id, {field, value, ...}, attempts JSON or false, ...}
]]
local stream, retry, attempts = KEYS[1], KEYS[2], KEYS[3]
local now = tonumber(ARGV[1])
local until_ms = string.format('%d', now + tonumber(ARGV[2]))
local out = {}
for _, entry in ipairs(rcall('ZRANGEBYSCORE', retry, '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))) do
  local found = rcall('XRANGE', stream, entry, entry)
  if found[1] then
    rcall('ZADD', retry, until_ms, entry)
    out[#out + 1] = entry
    out[#out + 1] = found[1][2]
    out[#out + 1] = rcall('HGET', attempts, entry)
  else
    rcall('ZREM', retry, entry)
    rcall('HDEL', attempts, entry)
  end
end
return out
