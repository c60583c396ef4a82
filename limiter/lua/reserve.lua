-- reserve.lua: hybrid mode takes a batch of tokens from the same counter hit.lua uses.
-- KEYS[1] the counter, KEYS[2] the reservation records.
-- ARGV[4] need (tokens the caller needs now), ARGV[5] max batch, ARGV[6] divisor
-- (k x expected instances), ARGV[7] instance id.
-- Grants min(free, max(need, min(max_batch, free // divisor))), or nothing when need does
-- not fit: the batch shrinks as the global remainder approaches zero.
-- Returns {granted, remaining, ms, tag, tag_left_ms}; ms as hit.lua (granted 0: until need
-- could pass). The tokens are valid only in window/epoch `tag`, for tag_left_ms.
local key, record = KEYS[1], KEYS[2]
local need, max_batch, divisor, instance = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local v = A.observe(key, now_ms())
local free = A.available(v)
local left = tag_left_ms(v)
if need > free then
  return { 0, free, A.wait_ms(v, need), v.index, left }
end
local granted = math.min(free, math.max(need, math.min(max_batch, idiv(free, divisor))))
A.take(key, v, granted)
local held = held_under(record, instance, v.index)
if held == 0 then prune_records(record, v.index) end
redis.call('HSET', record, instance, string.format('%d:%d', v.index, held + granted))
if redis.call('PTTL', record) < left then redis.call('PEXPIRE', record, left) end
return { granted, free - granted, A.reset_ms(v), v.index, left }
