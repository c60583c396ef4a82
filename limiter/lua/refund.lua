-- refund.lua: un-count an admitted hit whose request another limit denied.
-- KEYS[1] the counter; ARGV[4] the tag hit.lua returned, ARGV[5] the cost.
-- Returns the tokens given back: 0 once the window/epoch has ended (the hit then simply
-- stays counted, which is stricter, never looser).
local key, tag, n = KEYS[1], tonumber(ARGV[4]), tonumber(ARGV[5])
local v = A.observe(key, now_ms())
if v.index ~= tag or n <= 0 then return 0 end
A.give_back(key, v, n)
return n
