-- The run's capacity counter: n bytes if used + n <= limit, all or nothing. ARGV[4] the limit,
-- ARGV[5] n (0 only reads). Answers Capacity (code ok, no or limit); the first counter made sets
-- the limit.
local CAPACITY = KEYS[4]
if redis.call('EXISTS', RUN) == 0 then return UNKNOWN end
if redis.call('HSETNX', CAPACITY, 'limit', ARGV[4]) == 1
    and tree_ended() then
  redis.call('PEXPIRE', CAPACITY, redis.call('HGET', RUN, 'ttl_ms')) -- made after the tree ended
end
local f = redis.call('HMGET', CAPACITY, 'limit', 'used')
local used = tonumber(f[2] or '0')
local function capacity(code)
  return answer('Capacity', {code = code, limit = f[1], used = used})
end
if f[1] ~= ARGV[4] then return capacity('limit') end
if tonumber(ARGV[5]) == 0 then return capacity('no') end -- a read
if replayed() then return capacity('ok') end
if used + tonumber(ARGV[5]) <= tonumber(f[1]) then
  used = redis.call('HINCRBY', CAPACITY, 'used', ARGV[5])
  expire_ops()
  return capacity('ok')
end
release()
return capacity('no')
