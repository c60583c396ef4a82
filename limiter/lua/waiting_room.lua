-- waiting_room.lua: one step of a route's waiting room (docs/waiting-room.md), atomic.
--
-- KEYS (one {hash tag} per route): [1] waiting  zset ticket id -> arrival number
--                                  [2] ready    zset ticket id -> promoted at (ms): its turn came
--                                  [3] expiry   zset ticket id -> last seen + ttl (ms), every live ticket
--                                  [4] state    hash turns, ts (ms), seq
--                                  [5] spent    zset ticket id -> forget at (ms): admitted tickets
-- ARGV: [1] admit per second  [2] max waiting  [3] ticket ttl (ms)  [4] ticket id  [5] 1: the id
--       came back on a ticket, 0: a new arrival (the id is fresh)
-- Returns {code, position}: code 1 admitted, 0 wait (position >= 1: tickets ahead + 1),
-- 2 room full, 3 ticket already used.
--
-- Turns accrue at admit per second (Redis TIME), and each step first moves as many tickets
-- as there are whole turns from the head of `waiting` to `ready`; a ready ticket is
-- admitted when its client comes back. Turns in hand plus ready tickets never exceed one
-- second's worth, so at most 2 x rate requests pass in any second. A ticket not seen for
-- ttl is dropped from wherever it is (its place frees).
if redis.replicate_commands then redis.replicate_commands() end

local WAITING, READY, EXPIRY, STATE, SPENT = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local RATE = tonumber(ARGV[1])
local MAX_WAITING = tonumber(ARGV[2])
local TTL = tonumber(ARGV[3])
local ID = ARGV[4]
local RETURNING = ARGV[5] == '1'

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Forget tickets whose clients gave up (bounded per step; the rest go on the next ones).
local gone = redis.call('ZRANGEBYSCORE', EXPIRY, '-inf', now, 'LIMIT', 0, 500)
if #gone > 0 then
  redis.call('ZREM', EXPIRY, unpack(gone))
  redis.call('ZREM', WAITING, unpack(gone))
  redis.call('ZREM', READY, unpack(gone))
end
redis.call('ZREMRANGEBYSCORE', SPENT, '-inf', now)

local state = redis.call('HMGET', STATE, 'turns', 'ts')
local turns = tonumber(state[1]) or RATE
local ts = tonumber(state[2]) or now
if now > ts then turns = turns + (now - ts) * RATE / 1000 end
local ready = redis.call('ZCARD', READY)
local cap = RATE - ready
if cap < 0 then cap = 0 end
if turns > cap then turns = cap end

local waiting = redis.call('ZCARD', WAITING)
local promote = math.min(math.floor(turns), waiting)
if promote > 0 then
  local heads = redis.call('ZRANGE', WAITING, 0, promote - 1)
  redis.call('ZREM', WAITING, unpack(heads))
  local args = {}
  for i = 1, #heads do
    args[2 * i - 1] = now
    args[2 * i] = heads[i]
  end
  redis.call('ZADD', READY, unpack(args))
  turns = turns - promote
  waiting = waiting - promote
end

local function save()
  redis.call('HSET', STATE, 'turns', tostring(turns), 'ts', now)
  -- An idle room evaporates; a busy one is touched on every step.
  for i = 1, 5 do redis.call('PEXPIRE', KEYS[i], 2 * TTL + 1000) end
end

local function admit_ticket()
  redis.call('ZREM', READY, ID)
  redis.call('ZREM', EXPIRY, ID)
  redis.call('ZADD', SPENT, now + TTL, ID)
  save()
  return { 1, 0 }
end

if RETURNING then
  if redis.call('ZSCORE', READY, ID) then
    return admit_ticket()
  end
  local rank = redis.call('ZRANK', WAITING, ID)
  if rank then
    redis.call('ZADD', EXPIRY, now + TTL, ID)
    save()
    return { 0, rank + 1 }
  end
  if redis.call('ZSCORE', SPENT, ID) then
    save()
    return { 3, 0 }
  end
  -- Its ticket expired: it arrives again, at the back.
end

if waiting == 0 and turns >= 1 then
  -- Nobody waits and a turn is free: straight through.
  turns = turns - 1
  save()
  return { 1, 0 }
end
if redis.call('ZCARD', EXPIRY) >= MAX_WAITING then
  save()
  return { 2, 0 }
end
local seq = redis.call('HINCRBY', STATE, 'seq', 1)
redis.call('ZADD', WAITING, seq, ID)
redis.call('ZADD', EXPIRY, now + TTL, ID)
save()
return { 0, waiting + 1 }
