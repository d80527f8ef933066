--[[
  outbox_overflow.lua: an account's outbox holds more than `max` undelivered events (a receiver
  down while the account made many): its oldest beyond them, except the one out for delivery,
  go to the failed list (reason `overflow`) instead of being forgotten. In two calls so that a
  node dying between them duplicates a failed entry rather than losing an event:
  "peek" names them (the caller records them in {webhooks}:failed with lua/webhook_failed.lua,
  another slot), then "drop" removes exactly those from the outbox.

  Input:
    KEYS[1] outbox (list, oldest first, "<event id> <json>")     {a:<acct>}:outbox
    KEYS[2] outbox state (hash: seq, sent, at, entry, dropped)   {a:<acct>}:outbox:state
    ARGV[1] "peek" | "drop"
    peek: ARGV[2] max (events the outbox keeps), ARGV[3] batch (at most this many named)
    drop: ARGV[2] `dropped` as peek read it (forgotten with webhooks off: reported, then zeroed),
          ARGV[3..] the entries peek returned

  Output:
    peek: {dropped, entry...}  dropped = events the outbox lost past its hard cap (webhooks off)
    drop: the number of entries removed
]]
local outbox, state = KEYS[1], KEYS[2]
if ARGV[1] == 'drop' then
  local dropped = tonumber(ARGV[2]) or 0
  if dropped > 0 then
    rcall('HINCRBY', state, 'dropped', -dropped)
  end
  local removed = 0
  for i = 3, #ARGV do
    removed = removed + rcall('LREM', outbox, 1, ARGV[i])
  end
  return removed
end
local max, batch = tonumber(ARGV[2]), tonumber(ARGV[3])
local dropped = tonumber(rcall('HGET', state, 'dropped')) or 0
local excess = rcall('LLEN', outbox) - max
if excess <= 0 then
  return {dropped}
end
local skip = 0
local head = rcall('LINDEX', outbox, 0)
if head and string.match(head, '^(%S+)') == rcall('HGET', state, 'sent') then
  skip = 1 -- the event out for delivery stays; outbox_done.lua pops it
end
local n = math.min(excess, batch)
local out = rcall('LRANGE', outbox, skip, skip + n - 1)
table.insert(out, 1, dropped)
return out
