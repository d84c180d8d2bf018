-- One Model call and its money hold: checked and reserved in one step, all or nothing.
-- ARGV[4] the hold (integer picodollars, the call's max_cost rounded up; '0' for none).
-- ARGV[5], sent only for a partial hold (min_cost): the least hold the call can be made with.
-- Then the run holds as much of ARGV[4] as the money left pays for, at least ARGV[5], in this
-- one step, answers Held with the amount, and keeps the amount under the operation's id so that
-- a call sent again learns the same one.
local f = redis.call('HMGET', RUN, 'state', 'deadline', 'budget', 'l_model_calls', 'model_calls',
  'l_cost', 'cost', 'cost_held')
if not f[1] then return UNKNOWN end
local least = ARGV[5]
if replayed() then -- granted then: a refusal releases its id
  if least then return answer('Held', {code = 'held', held = redis.call('HGET', OPS, OP)}) end
  return PASSED
end
local used = tonumber(f[5])
local hold = ARGV[4] or '0' -- none sent: no hold
if live(f[1], f[2]) and used < tonumber(f[4]) and within_cost(f[6], f[7], f[8], least or hold) then
  local held = hold
  if least then held = affordable(f[6], f[7], f[8], hold) end
  if held ~= '0' then redis.call('HINCRBY', RUN, 'cost_held', held) end
  redis.call('HINCRBY', RUN, 'model_calls', 1)
  local granted = grant(f[3])
  if not least then return granted end
  redis.call('HSET', OPS, OP, held) -- what a call sent again with this id answers
  return answer('Held', {code = 'held', held = held})
end
if used >= tonumber(f[4]) or not f[6] or f[6] == '' then -- else the money limit refused it
  return refuse('MODEL', f[1], f[2], 'model_calls',
    text('model_calls', {limit = f[4], call = used + 1}))
end
return refuse('MODEL', f[1], f[2], 'cost', cost_refused(f[6], f[7], f[8], least or hold))
