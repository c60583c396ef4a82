-- hit.lua: one exact hit. KEYS[1] the counter; ARGV[4] the cost.
-- Returns {allowed 1|0, remaining, ms, limit, tag}; ms: if allowed, until the quota resets;
-- if denied, until `cost` could pass (-1: never). tag: the window/epoch the hit counted in
-- (refund.lua takes it). A denied hit writes nothing.
local cost = tonumber(ARGV[4])
local v = A.observe(KEYS[1], now_ms())
local free = A.available(v)
if cost > free then
  return { 0, free, A.wait_ms(v, cost), LIMIT, v.index }
end
A.take(KEYS[1], v, cost)
return { 1, free - cost, A.reset_ms(v), LIMIT, v.index }
