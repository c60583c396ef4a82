-- release.lua: give back unused reserved tokens (graceful shutdown).
-- KEYS[1] the counter, KEYS[2] the reservation records.
-- ARGV[4] tag, ARGV[5] tokens, ARGV[6] instance id. Returns the tokens given back.
-- Only in the window/epoch the tokens were reserved in, and never more than the record
-- says this instance holds: a stale release never lands in the next window.
local key, record = KEYS[1], KEYS[2]
local tag, n, instance = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local v = A.observe(key, now_ms())
if v.index ~= tag then return 0 end
local held = held_under(record, instance, tag)
local give = math.min(n, held)
if give <= 0 then return 0 end
A.give_back(key, v, give)
if held == give then
  redis.call('HDEL', record, instance)
else
  redis.call('HSET', record, instance, string.format('%d:%d', tag, held - give))
end
return give
