-- fixed_window.lua: a counter per window (index = now // window).
--
-- One hash: w (window index), c (hits admitted in it). Its TTL runs to the window's end.
local A = {}

function A.observe(key, now)
  local s = redis.call('HMGET', key, 'w', 'c')
  local index = idiv(now, WINDOW)
  local w = tonumber(s[1])
  local c = 0
  if w then
    if w > index then index = w end -- Redis's clock went back: keep counting in the stored window
    if w == index then c = tonumber(s[2]) or 0 end
  end
  return { now = now, index = index, elapsed = math.max(0, now - index * WINDOW), c = c }
end

function A.available(v)
  return math.max(0, LIMIT - v.c)
end

local function save(key, v)
  redis.call('HSET', key, 'w', v.index, 'c', v.c)
  redis.call('PEXPIRE', key, WINDOW - v.elapsed)
end

function A.take(key, v, n)
  v.c = v.c + n
  save(key, v)
end

function A.give_back(key, v, n)
  v.c = math.max(0, v.c - n)
  save(key, v)
end

function A.reset_ms(v)
  return WINDOW - v.elapsed
end

function A.wait_ms(v, need)
  if need > LIMIT then return -1 end
  if A.available(v) >= need then return 0 end
  return WINDOW - v.elapsed
end
