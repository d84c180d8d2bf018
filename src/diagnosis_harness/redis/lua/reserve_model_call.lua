-- One Model call and its money hold: checked at the caller's run and every ancestor, lowest
-- first, and reserved in all of them in one step, all or nothing.
-- ARGV[4] the hold (integer picodollars, the call's max_cost rounded up; '0' for none).
-- ARGV[5], sent only for a partial hold (min_cost): the least hold the call can be made with.
-- Then the path holds as much of ARGV[4] as the money left pays for at every level (the least
-- of them), at least ARGV[5], in this one step, answers Held with the amount, and keeps the
-- amount under the operation's id so that a call sent again learns the same one.
local f = redis.call('HMGET', RUN, 'state', 'deadline', 'budget', 'path')
if not f[1] then return UNKNOWN end
local least = ARGV[5]
if replayed() then -- granted then: a refusal releases its id
  if least then return answer('Held', {code = 'held', held = redis.call('HGET', OPS, OP)}) end
  return PASSED
end
local hold = ARGV[4] or '0' -- none sent: no hold
local floor = least or hold
local path = path_of(SELF_ID, f[4])
if not live(f[1], f[2]) then return refuse('MODEL', f[1], f[2]) end
local held = hold
for i, id in ipairs(path) do
  local l = redis.call('HMGET', key_of(id, 'run'), 'l_model_calls', 'model_calls', 'l_cost', 'cost',
    'cost_held')
  local used = tonumber(l[2])
  if used >= tonumber(l[1]) then
    return refuse('MODEL', f[1], f[2], path, i, 'model_calls',
      text('model_calls', {limit = l[1], call = used + 1}))
  end
  if not within_cost(l[3], l[4], l[5], floor) then
    return refuse('MODEL', f[1], f[2], path, i, 'cost', cost_refused(l[3], l[4], l[5], floor))
  end
  if least then
    local room = affordable(l[3], l[4], l[5], hold)
    if tonumber(room) < tonumber(held) then held = room end
  end
end
for _, id in ipairs(path) do
  local run = key_of(id, 'run')
  if held ~= '0' then redis.call('HINCRBY', run, 'cost_held', held) end
  redis.call('HINCRBY', run, 'model_calls', 1)
end
local granted = grant(f[3])
if not least then return granted end
redis.call('HSET', OPS, OP, held) -- what a call sent again with this id answers
return answer('Held', {code = 'held', held = held})
