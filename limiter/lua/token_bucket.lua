-- token_bucket.lua: capacity LIMIT, REFILL tokens added every WINDOW ms.
--
-- One hash: c (tokens), ts (time of the last refill step, ms). Refills are whole steps
-- counted from ts; a full bucket's clock restarts when it is first drawn from. The TTL
-- runs until the bucket would be full again: an absent key is a full bucket.
-- The refill epoch (now // WINDOW) tags hybrid reservations.
local A = {}

function A.observe(key, now)
  local s = redis.call('HMGET', key, 'c', 'ts')
  local tokens, stamp = LIMIT, now
  local c, ts = tonumber(s[1]), tonumber(s[2])
  if c and ts then
    local steps = math.max(0, idiv(now - ts, WINDOW))
    tokens = math.min(LIMIT, c + steps * REFILL)
    if tokens == LIMIT then stamp = now else stamp = ts + steps * WINDOW end
  end
  local index = idiv(now, WINDOW)
  return { now = now, index = index, elapsed = now - index * WINDOW, c = tokens, ts = stamp }
end

function A.available(v)
  return v.c
end

function A.reset_ms(v)
  local missing = LIMIT - v.c
  if missing <= 0 then return 0 end
  return v.ts + idiv(missing + REFILL - 1, REFILL) * WINDOW - v.now
end

local function save(key, v)
  if v.c >= LIMIT then
    redis.call('DEL', key)
    return
  end
  redis.call('HSET', key, 'c', v.c, 'ts', v.ts)
  redis.call('PEXPIRE', key, math.max(1, A.reset_ms(v)))
end

function A.take(key, v, n)
  v.c = v.c - n
  save(key, v)
end

function A.give_back(key, v, n)
  v.c = math.min(LIMIT, v.c + n)
  save(key, v)
end

function A.wait_ms(v, need)
  if need > LIMIT then return -1 end
  if v.c >= need then return 0 end
  return v.ts + idiv(need - v.c + REFILL - 1, REFILL) * WINDOW - v.now
end
