-- One Model call and its money hold: checked and reserved in one step, all or nothing.
-- ARGV[4] the hold (integer picodollars, the call's max_cost rounded up; '0' for none).
local f = redis.call('HMGET', RUN, 'state', 'deadline', 'budget', 'l_model_calls', 'model_calls',
  'l_cost', 'cost', 'cost_held')
if not f[1] then return UNKNOWN end
if replayed() then return PASSED end -- granted then: a refusal releases its id
local used = tonumber(f[5])
local hold = ARGV[4] or '0' -- none sent: no hold
if live(f[1], f[2]) and used < tonumber(f[4]) and within_cost(f[6], f[7], f[8], hold) then
  if hold ~= '0' then redis.call('HINCRBY', RUN, 'cost_held', hold) end
  redis.call('HINCRBY', RUN, 'model_calls', 1)
  return grant(f[3])
end
if used >= tonumber(f[4]) or not f[6] or f[6] == '' then -- else the money limit refused it
  return refuse('MODEL', f[1], f[2], 'model_calls',
    text('model_calls', {limit = f[4], call = used + 1}))
end
return refuse('MODEL', f[1], f[2], 'cost', cost_refused(f[6], f[7], f[8], hold))
