#!lua flags=no-writes,allow-cross-slot-keys
--[[
  reap_scan.lua: Redis Cluster only. Read many shards of a per-slot index in ONE call on the node
  that owns them, instead of one command per hash slot (16384): for the reaper's index, the
  accounts with a hold whose lease deadline has passed; for the webhook outbox index
  (upgate/webhooks/outbox.py), the accounts with an event due to move. The shards live in different slots of this node, so
  they are named from ARGV (undeclared) and the script carries the `allow-cross-slot-keys` flag
  (Redis 7+); the caller routes it to the node. Writes nothing. It takes no shared helpers: the flags
  line must stay the first line.)

  Input:
    KEYS: none
    ARGV[1]  now, ms: deadlines at or before it are due
    ARGV[2]  at most this many accounts per shard
    ARGV[3]  the shards' slot tags, comma-separated (one argument: cheap to send)
    ARGV[4]  a shard name's prefix "reap:{" or "whout:{"   (name = prefix .. tag .. suffix)
    ARGV[5]  a shard name's suffix "}"

  Output: a flat list {shard position (1 = the first tag), account id, ...} of the due accounts
]]
local now = ARGV[1]
local per_shard = tonumber(ARGV[2])
local tags, prefix, suffix = ARGV[3], ARGV[4], ARGV[5]

local due = {}
local position = 0
for tag in string.gmatch(tags, '[^,]+') do
  position = position + 1
  local accounts = rcall('ZRANGEBYSCORE', prefix .. tag .. suffix, '-inf', now, 'LIMIT', 0, per_shard)
  for _, account_id in ipairs(accounts) do
    due[#due + 1] = position
    due[#due + 1] = account_id
  end
end
return due
