-- common.lua: prepended to every Gatehouse rate-limit script.
--
-- ARGV[1..3] are the limit (token bucket: capacity), window_ms (token bucket: the refill
-- period) and refill_tokens. Every key a script touches is in KEYS and shares one
-- {hash tag}, so the script runs on one Redis Cluster node.
--
-- Numbers are Lua doubles: LimitSpec keeps limit * window_ms <= 1e15, so every product
-- below stays an exact integer (< 2^53), and idiv() floors exactly.

-- Redis < 5 replicates scripts verbatim; TIME makes them non-deterministic, so ask for
-- effects replication there. (A no-op from Redis 5 on, where it is the default.)
if redis.replicate_commands then redis.replicate_commands() end

local LIMIT = tonumber(ARGV[1])
local WINDOW = tonumber(ARGV[2])
local REFILL = tonumber(ARGV[3])

-- The clock is Redis's own (seconds and microseconds), never the caller's.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- floor(a / b) for integers, exact even where a / b rounds up to the next integer.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- Ms until the window or refill epoch v.index ends: reservations tagged with it lapse then.
local function tag_left_ms(v)
  return (v.index + 1) * WINDOW - v.now
end

-- Reservation records: hash field <instance id> = "<tag>:<tokens>": tokens the instance
-- reserved in window/epoch <tag> and has not given back (admitted ones included).
local function held_under(record, instance, tag)
  local value = redis.call('HGET', record, instance)
  if not value then return 0 end
  local t, n = string.match(value, '^(%d+):(%d+)$')
  if tonumber(t) ~= tag then return 0 end
  return tonumber(n)
end

-- Drop records of windows/epochs that have ended (never one of the current tag or later:
-- a live reservation is never evicted).
local function prune_records(record, tag)
  local all = redis.call('HGETALL', record)
  for i = 1, #all, 2 do
    local t = tonumber(string.match(all[i + 1], '^(%d+):'))
    if t == nil or t < tag then redis.call('HDEL', record, all[i]) end
  end
end
