#!lua flags=no-writes,allow-cross-slot-keys
--[[
  request_find.lua: Redis Cluster only. Look one request id up in every request-index shard
  (request id -> "<account>|<time ms>", one hash per hash slot, named to land in that slot) that
  this node owns, in ONE call instead of one HGET per slot. The shards live in different slots of
  this node, so they are named from ARGV (undeclared) and the script carries the
  `allow-cross-slot-keys` flag (Redis 7+); the caller routes it to the node. Writes nothing.
  (It takes no shared helpers: the flags line must stay the first line.)

  Input:
    KEYS: none
    ARGV[1]  the request id
    ARGV[2]  the shards' slot tags, comma-separated
    ARGV[3]  the UTC day numbers to look in, comma-separated
    ARGV[4]  a shard name's prefix "reqidx:{"   (name = prefix .. tag .. suffix .. day)
    ARGV[5]  a shard name's suffix "}:"

  Output: the index entry "<account>|<time ms>", or false (nil) when no shard of this node has it
]]
local request_id, tags, days, prefix, suffix = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

for tag in string.gmatch(tags, '[^,]+') do
  local shard = prefix .. tag .. suffix
  for day in string.gmatch(days, '[^,]+') do
    local found = rcall('HGET', shard .. day, request_id)
    if found then
      return found
    end
  end
end
return false
