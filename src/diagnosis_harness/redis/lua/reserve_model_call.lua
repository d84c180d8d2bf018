-- One Model call: checked and reserved in one step.
local f = redis.call('HMGET', RUN, 'state', 'deadline', 'budget', 'l_model_calls', 'model_calls')
if not f[1] then return {'unknown'} end
if replayed() then return status('ok') end
local used = tonumber(f[5])
if live(f[1], f[2]) and used < tonumber(f[4]) then
  redis.call('HINCRBY', RUN, 'model_calls', 1)
  return grant(f[3])
end
return refuse('MODEL', f[1], f[2], 'model_calls',
  f[4] .. ' reached: Model call ' .. (used + 1) .. ' refused')
