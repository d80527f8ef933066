#!lua flags=no-writes,allow-cross-slot-keys
--[[
  request_get.lua: the record of one request id, in ONE call: look the id up in the request
  index (keep_record, _lib.lua: per UTC day, listpack-sized buckets at each width up to the
  day's count), then read the record at its place in the account's records list. On a single
  Redis the index has one set of names; on a Redis Cluster one per hash slot, named to land in
  that slot, and the caller sends this to every master with the slots it owns (the account's
  keys share the slot of its index shard, so they are on the same node). The names are built
  from ARGV (undeclared), hence the `allow-cross-slot-keys` flag (Redis 7+). Writes nothing.
  Index days written before the packed records (one hash per day, id -> "<account>|<time ms>")
  are read too: the caller then reads that record from the account's old sorted set.

  Input:
    KEYS: none
    ARGV[1]  the request id's key (request_record.rid_key)
    ARGV[2]  the request id as text (the old index's field)
    ARGV[3]  the shards' slot tags, comma-separated ("" on a single Redis)
    ARGV[4]  the UTC day numbers to look in, comma-separated, newest first
    ARGV[5]  an index name's prefix "reqidx:" / "reqidx:{"   (name = prefix .. tag .. suffix .. day)
    ARGV[6]  its suffix "" / "}:"
    ARGV[7]  an account key's prefix "{a:"; ARGV[8] the records list's suffix "}:rq";
    ARGV[9]  the wallet's suffix "}:wallet"; ARGV[10] the refused records list's suffix "}:rf"
    ARGV[11] a single Redis: the nodes' published retention (zset upgate:request_log_days, member
             "days"): the days looked in go back that far too, when it is longer than ARGV[4]'s

  Output: {1, account key, stored record} | {2, "<account>|<time ms>"} (an old index entry)
          | false when no index of this node has it
]]
local rid, rid_text, tags, days, prefix, suffix = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
if ARGV[11] and ARGV[11] ~= '' then -- (days: newest first, one day ahead and one behind the retention)
  local published = tonumber(rcall('ZSCORE', ARGV[11], 'days')) or 0
  local list = {}
  for d in string.gmatch(days, '[^,]+') do
    list[#list + 1] = tonumber(d)
  end
  local oldest = list[1] - 1 - published - 1
  local have = list[#list]
  for d = have - 1, oldest, -1 do
    list[#list + 1] = d
  end
  for i = 1, #list do
    list[i] = istr(list[i])
  end
  days = table.concat(list, ',')
end

local function account_text(k)
  if #k ~= 16 then
    return k
  end
  local hex = string.gsub(k, '.', function(c) return string.format('%02x', string.byte(c)) end)
  return string.sub(hex, 1, 8) .. '-' .. string.sub(hex, 9, 12) .. '-' .. string.sub(hex, 13, 16) .. '-' ..
         string.sub(hex, 17, 20) .. '-' .. string.sub(hex, 21)
end

local function record_at(entry)
  local kind, seq, acct = string.match(entry, '^(r?)(%d+)|(.*)$')
  if not seq then
    return nil
  end
  local t = ARGV[7] .. account_text(acct)
  local refused = kind == 'r'
  local gone = tonumber(rcall('HGET', t .. ARGV[9], refused and 'ref_gone' or 'rec_gone')) or 0
  local pos = tonumber(seq) - gone - 1
  local s = pos >= 0 and rcall('LINDEX', t .. (refused and ARGV[10] or ARGV[8]), pos)
  if s then
    local _, got = rec_head(s)
    if got == rid then
      return {1, acct, s}
    end
  end
  return nil
end

local shards = {}
if tags == '' then
  shards[1] = prefix .. suffix
else
  for tag in string.gmatch(tags, '[^,]+') do
    shards[#shards + 1] = prefix .. tag .. suffix
  end
end
for _, shard in ipairs(shards) do
  for day in string.gmatch(days, '[^,]+') do
    local index_day = shard .. day
    local count = tonumber(rcall('GET', index_day .. ':n'))
    if count then
      for w = rec_width(count), 0, -1 do
        local entry = rcall('HGET', rec_bucket(index_day, rid, w), rid)
        if entry then
          local found = record_at(entry)
          if found then
            return found
          end
        end
      end
    end
    local old = rcall('HGET', index_day, rid_text)
    if old then
      return {2, old}
    end
  end
end
return false
