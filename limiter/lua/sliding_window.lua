-- sliding_window.lua: the sliding-window counter.
--
-- estimate = p * (window - elapsed) / window + c, where c counts this window and p the
-- previous one; a hit of `cost` passes while estimate + cost <= limit.
-- One hash: w (window index = now // window), c, p. Its TTL runs to the end of window
-- w + 1, where it is still read as p: a key lives for two windows after its window begins.
local A = {}

function A.observe(key, now)
  local s = redis.call('HMGET', key, 'w', 'c', 'p')
  local index = idiv(now, WINDOW)
  local w = tonumber(s[1])
  local c, p = 0, 0
  if w then
    if w > index then index = w end -- Redis's clock went back: keep counting in the stored window
    if w == index then
      c, p = tonumber(s[2]) or 0, tonumber(s[3]) or 0
    elseif w == index - 1 then
      p = tonumber(s[2]) or 0
    end
  end
  return { now = now, index = index, elapsed = math.max(0, now - index * WINDOW), c = c, p = p }
end

function A.available(v)
  local room = LIMIT * WINDOW - v.p * (WINDOW - v.elapsed) - v.c * WINDOW
  if room <= 0 then return 0 end
  return idiv(room, WINDOW)
end

local function save(key, v)
  redis.call('HSET', key, 'w', v.index, 'c', v.c, 'p', v.p)
  redis.call('PEXPIRE', key, 2 * WINDOW - v.elapsed)
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
  if v.c + need <= LIMIT then -- later in this window, as the previous window's weight fades
    local at = WINDOW - idiv((LIMIT - v.c - need) * WINDOW, v.p)
    if at <= WINDOW - 1 then return at - v.elapsed end
  end
  local at = 0 -- next window: this window's hits become the previous window's
  if v.c > 0 then at = math.max(0, WINDOW - idiv((LIMIT - need) * WINDOW, v.c)) end
  return (WINDOW - v.elapsed) + at
end
