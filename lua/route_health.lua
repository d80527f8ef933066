--[[
  route_health.lua: the shared health of a model's routes and of a provider's pooled keys
  (docs/routes.md). Called only when something failed, or when a route that had failed answers
  again: never on a healthy request's path. Every change is PUBLISHed on the events channel, so
  every node keeps the health in memory and the choice of a route costs no I/O:
    {"t":"route","kind":"route"|"key","subject":<model|provider>,"member":<route id|key variable>,
     "failures":<n>,"until_ms":<ms>,"now_ms":<ms>}
  (now_ms is Redis' clock, so a node converts until_ms to seconds left whatever its own clock).
  Not money: one hash per model (or per provider's pool), outside every account's hash tag.

  Input:
    KEYS[1] the hash: {rt:<model>}:health (route ops) or {pk:<provider>}:keys (refuse)
            fields "<member>:f" (failures in a row) and "<member>:u" (cold until, ms)
    ARGV[1] "fail" | "ok" | "refuse"
    ARGV[2] subject: the model id (fail, ok) or the provider name (refuse)
    ARGV[3] member: the route id "<provider>|<upstream model>", or the key's variable name
    ARGV[4] failures in a row that make a route cold
    ARGV[5] how long a cold route or a refused key stays out, ms
    ARGV[6] events channel
    ARGV[7] now, ms; "0" = Redis TIME
    ARGV[8] how long a run of failures is remembered, ms

  Output: {failures, until_ms, now_ms, cold_now}
    cold_now = 1 when this call turned the route cold (or set the key aside); until_ms = 0
    when it is not cold
]]
local state_key = KEYS[1]
local op, subject, member = ARGV[1], ARGV[2], ARGV[3]
local needed = tonumber(ARGV[4])
local cold_ms = tonumber(ARGV[5])
local channel = ARGV[6]
local now = clock_ms(ARGV[7])
local memory_ms = tonumber(ARGV[8])
local f_field, u_field = member .. ':f', member .. ':u'

local s = rcall('HMGET', state_key, f_field, u_field)
local failures = tonumber(s[1]) or 0
local until_ms = tonumber(s[2]) or 0
if until_ms <= now then
  until_ms = 0
end

local function publish(kind)
  rcall('PUBLISH', channel, '{"t":"route","kind":"' .. kind .. '","subject":' .. cjson.encode(subject) ..
        ',"member":' .. cjson.encode(member) .. ',"failures":' .. istr(failures) ..
        ',"until_ms":' .. istr(until_ms) .. ',"now_ms":' .. istr(now) .. '}')
end

local function keep()
  local ttl = memory_ms
  if cold_ms > ttl then
    ttl = cold_ms
  end
  rcall('PEXPIRE', state_key, istr(ttl))
end

if op == 'ok' then
  if failures > 0 then
    failures = 0
    rcall('HSET', state_key, f_field, '0')
    publish('route')
  end
  return {0, until_ms, now, 0}
end

if op == 'refuse' then
  if until_ms > 0 then
    return {0, until_ms, now, 0}
  end
  until_ms = now + cold_ms
  rcall('HSET', state_key, u_field, istr(until_ms))
  keep()
  publish('key')
  return {0, until_ms, now, 1}
end

-- fail (a failure while cold is another node's attempt begun before it heard: no new period)
if until_ms > 0 then
  return {failures, until_ms, now, 0}
end
local made_cold
failures, until_ms, made_cold = strike(failures, needed, cold_ms, now)
rcall('HSET', state_key, f_field, istr(failures), u_field, istr(until_ms))
keep()
publish('route')
return {failures, until_ms, now, made_cold}
