-- waiting_room.lua: one step of a route's waiting room (docs/waiting-room.md), atomic.
--
-- KEYS (one {hash tag} per route): [1] waiting  zset ticket id -> arrival number (waiting)
--                                  [2] ready    zset ticket id -> turn passes on at (ms): its turn came
--                                  [3] expiry   zset ticket id -> last seen + ttl (ms), every live ticket
--                                  [4] state    hash turns, ts (ms), seq
--                                  [5] spent    zset ticket id -> forget at (ms): admitted tickets
--                                  [6] due      hash ticket id -> when its client was told to come back (ms)
--                                  [7] missed   zset ticket id -> missed at (ms): its turn passed on
-- ARGV: [1] admit per second  [2] max waiting  [3] ticket ttl (ms)  [4] ticket id  [5] 1: the id
--       came back on a ticket, 0: a new arrival (the id is fresh)  [6] grace (ms)
-- Returns {code, position, retry after (s)}: code 1 admitted, 0 wait (position >= 1: tickets
-- ahead + 1), 2 room full, 3 ticket already used.
--
-- Turns accrue at admit per second (Redis TIME), and each step first moves as many tickets
-- as there are whole turns from the head of `waiting` to `ready`; a ready ticket is
-- admitted when its client comes back. Turns in hand plus ready tickets never exceed one
-- second's worth, so at most 2 x rate requests pass in any second. A waiting client is told
-- when to come back (Retry-After); a ready ticket whose client has not come back by then
-- plus the grace has missed its turn: the turn goes back in hand (to the next ticket) and
-- the ticket waits in `missed`, to take the next turn when its client does come back. A
-- ticket not seen for ttl is dropped from wherever it is (its place frees).
if redis.replicate_commands then redis.replicate_commands() end

local WAITING, READY, EXPIRY, STATE, SPENT, DUE, MISSED = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local RATE = tonumber(ARGV[1])
local MAX_WAITING = tonumber(ARGV[2])
local TTL = tonumber(ARGV[3])
local ID = ARGV[4]
local RETURNING = ARGV[5] == '1'
local GRACE = tonumber(ARGV[6])
-- A ticket at the head whose client is here may take a turn this much of a turn early.
local EARLY = 0.1
-- Work bounds per step (the rest is done by the next steps).
local MAX_GONE, MAX_MISSES = 500, 1000
-- A missed ticket whose client comes back goes ahead of every arrival number (ms times
-- stay below 1e13 until the year 2286; every score is written as an integer).
local FRONT = -1e13

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Forget tickets whose clients gave up.
local gone = redis.call('ZRANGEBYSCORE', EXPIRY, '-inf', now, 'LIMIT', 0, MAX_GONE)
if #gone > 0 then
  redis.call('ZREM', EXPIRY, unpack(gone))
  redis.call('ZREM', WAITING, unpack(gone))
  redis.call('ZREM', READY, unpack(gone))
  redis.call('ZREM', MISSED, unpack(gone))
  redis.call('HDEL', DUE, unpack(gone))
end
redis.call('ZREMRANGEBYSCORE', SPENT, '-inf', now)

local state = redis.call('HMGET', STATE, 'turns', 'ts')
local turns = tonumber(state[1]) or RATE
local ts = tonumber(state[2]) or now
local misses = 0

local function miss(ids)
  -- Their turns go back in hand (turns + ready is unchanged: the bound holds).
  local args = {}
  for i = 1, #ids do
    args[2 * i - 1] = now
    args[2 * i] = ids[i]
  end
  redis.call('ZADD', MISSED, unpack(args))
  turns = turns + #ids
  misses = misses + #ids
end

local late = redis.call('ZRANGEBYSCORE', READY, '-inf', now, 'LIMIT', 0, MAX_MISSES)
if #late > 0 then
  redis.call('ZREM', READY, unpack(late))
  miss(late)
end

if now > ts then turns = turns + (now - ts) * RATE / 1000 end
local cap = RATE - redis.call('ZCARD', READY)
if cap < 0 then cap = 0 end
if turns > cap then turns = cap end

if RETURNING then
  local missed_at = redis.call('ZSCORE', MISSED, ID)
  if missed_at then
    -- Its client missed its turn and is back: it takes the next one.
    redis.call('ZREM', MISSED, ID)
    redis.call('ZADD', WAITING, string.format('%.0f', FRONT + tonumber(missed_at)), ID)
  end
  if redis.call('ZSCORE', WAITING, ID) then
    -- Here now: a turn that comes in this step is not missed.
    redis.call('HSET', DUE, ID, now)
  end
end

-- Move whole turns' worth of tickets from the head of the queue to ready. A ticket whose
-- client was due back more than the grace ago is not here: its turn passes on at once.
local waiting = redis.call('ZCARD', WAITING)
while true do
  local promote = math.min(math.floor(turns), waiting)
  if promote <= 0 then break end
  local heads = redis.call('ZRANGE', WAITING, 0, promote - 1)
  redis.call('ZREM', WAITING, unpack(heads))
  local dues = redis.call('HMGET', DUE, unpack(heads))
  redis.call('HDEL', DUE, unpack(heads))
  turns = turns - promote
  waiting = waiting - promote
  local ready, away = {}, {}
  for i = 1, #heads do
    local deadline = (tonumber(dues[i]) or now) + GRACE
    if deadline > now then
      ready[#ready + 1] = deadline
      ready[#ready + 1] = heads[i]
    else
      away[#away + 1] = heads[i]
    end
  end
  if #ready > 0 then redis.call('ZADD', READY, unpack(ready)) end
  if #away == 0 then break end
  miss(away)
  if misses >= MAX_MISSES then break end
end

-- Retry-After is in whole seconds, so a client that keeps to it can come back a little
-- before its turn accrues; at the head of the queue it takes the turn then, up to 0.9 of a
-- turn early. Turns in hand stay above -1, so a second still admits at most
-- 2 x rate + 0.9, that is 2 x rate (admissions are whole).
if RETURNING and waiting > 0 and turns >= EARLY then
  local head = redis.call('ZRANGE', WAITING, 0, 0)
  if head[1] == ID then
    redis.call('ZREM', WAITING, ID)
    redis.call('HDEL', DUE, ID)
    redis.call('ZADD', READY, now + GRACE, ID)
    turns = turns - 1
    waiting = waiting - 1
  end
end

local function save()
  redis.call('HSET', STATE, 'turns', tostring(turns), 'ts', now)
  -- An idle room evaporates; a busy one is touched on every step.
  for i = 1, 7 do redis.call('PEXPIRE', KEYS[i], 2 * TTL + 1000) end
end

local function wait_at(position)
  -- Tell the client when to come back, and remember it: its turn waits that long plus the
  -- grace. The time is for half of its turn to have accrued (it may take it from EARLY on):
  -- a client that keeps to it is not turned away for being a few ms early, nor does it hold
  -- the turn for long. At most half the ttl, so a ticket brought back when told never expires.
  local until_turn = (position - 0.5 - turns) / RATE
  local retry = math.max(1, math.min(math.ceil(until_turn), math.floor(TTL / 2000)))
  redis.call('HSET', DUE, ID, now + retry * 1000)
  redis.call('ZADD', EXPIRY, now + TTL, ID)
  save()
  return { 0, position, retry }
end

if RETURNING then
  if redis.call('ZSCORE', READY, ID) then
    redis.call('ZREM', READY, ID)
    redis.call('ZREM', EXPIRY, ID)
    redis.call('ZADD', SPENT, now + TTL, ID)
    save()
    return { 1, 0, 0 }
  end
  local rank = redis.call('ZRANK', WAITING, ID)
  if rank then
    return wait_at(rank + 1)
  end
  if redis.call('ZSCORE', SPENT, ID) then
    save()
    return { 3, 0, 0 }
  end
  -- Its ticket expired: it arrives again, at the back.
end

if waiting == 0 and turns >= 1 then
  -- Nobody waits and a turn is free: straight through.
  turns = turns - 1
  save()
  return { 1, 0, 0 }
end
if redis.call('ZCARD', EXPIRY) >= MAX_WAITING then
  save()
  return { 2, 0, 0 }
end
local seq = redis.call('HINCRBY', STATE, 'seq', 1)
redis.call('ZADD', WAITING, seq, ID)
return wait_at(waiting + 1)
