--[[
  cooldown.lua: a model's cool-down state. `strike`: the provider rate-limited the model once
  more; the `needed`-th strike in a row makes the model cold for cold_ms (and starts the count
  again). Strikes while cold are ignored. `reset`: a success ends the run of strikes. Every
  change is PUBLISHed on the events channel, so every node keeps the cold set in memory and the
  hot path spends no round trip on it:
    {"t":"cooldown","model":<id>,"strikes":<n>,"until_ms":<ms>,"now_ms":<ms>}
  (now_ms is Redis' clock, so a node converts until_ms to seconds left whatever its own clock).
  The key is per model, outside every account's hash tag.

  Input:
    KEYS[1] the model's cool-down hash {strikes, until_ms}   {m:<model>}:cooldown
    ARGV[1] "strike" | "reset"
    ARGV[2] model id
    ARGV[3] strikes in a row that make the model cold
    ARGV[4] how long it stays cold, ms
    ARGV[5] events channel
    ARGV[6] now, ms; "0" = Redis TIME
    ARGV[7] how long a run of strikes is remembered, ms

  Output: {strikes, until_ms, now_ms, cold_now}
    cold_now = 1 when this call made the model cold; until_ms = 0 when it is not cold
]]
local state_key = KEYS[1]
local op, model = ARGV[1], ARGV[2]
local needed = tonumber(ARGV[3])
local cold_ms = tonumber(ARGV[4])
local channel = ARGV[5]
local now = clock_ms(ARGV[6])
local memory_ms = tonumber(ARGV[7])

local s = rcall('HMGET', state_key, 'strikes', 'until_ms')
local strikes = tonumber(s[1]) or 0
local until_ms = tonumber(s[2]) or 0
if until_ms <= now then
  until_ms = 0
end

local function publish()
  rcall('PUBLISH', channel, '{"t":"cooldown","model":' .. cjson.encode(model) ..
        ',"strikes":' .. istr(strikes) .. ',"until_ms":' .. istr(until_ms) ..
        ',"now_ms":' .. istr(now) .. '}')
end

if op == 'reset' then
  if strikes > 0 then
    strikes = 0
    rcall('HSET', state_key, 'strikes', '0')
    publish()
  end
  return {0, until_ms, now, 0}
end

-- strike
if until_ms > 0 then
  return {strikes, until_ms, now, 0}
end
local made_cold
strikes, until_ms, made_cold = strike(strikes, needed, cold_ms, now)
rcall('HSET', state_key, 'strikes', istr(strikes), 'until_ms', istr(until_ms))
local ttl = memory_ms
if cold_ms > ttl then
  ttl = cold_ms
end
rcall('PEXPIRE', state_key, istr(ttl))
publish()
return {strikes, until_ms, now, made_cold}
