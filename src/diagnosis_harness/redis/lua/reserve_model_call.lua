-- One Model call: checked and reserved in one step.
local f = redis.call('HMGET', RUN, 'state', 'deadline', 'budget', 'l_model_calls', 'model_calls')
if not f[1] then return UNKNOWN end
if replayed() then return PASSED end -- granted then: a refusal releases its id
local used = tonumber(f[5])
if live(f[1], f[2]) and used < tonumber(f[4]) then
  redis.call('HINCRBY', RUN, 'model_calls', 1)
  return grant(f[3])
end
return refuse('MODEL', f[1], f[2], 'model_calls',
  text('model_calls', {limit = f[4], call = used + 1}))
