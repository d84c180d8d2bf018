-- A call's settle: its actual cost (integer picodollars, rounded up) and tokens recorded as
-- reported, and its hold released, at the caller's run and every ancestor, in one step -- even
-- past a limit (which then exhausts the budget and ends the path up to the highest level past
-- one: exhaust_levels) and after the run ended (the call it paid for happened).
-- ARGV[4] the call's boundary (MODEL or TOOL), ARGV[5] its hold, ARGV[6] the cost, ARGV[7]
-- input tokens, ARGV[8] output tokens.
local f = redis.call('HMGET', RUN, 'state', 'path')
if not f[1] then return UNKNOWN end
if replayed() then return status('ok') end
local path = path_of(SELF_ID, f[2])
local overs = {}
for i, id in ipairs(path) do
  local run = key_of(id, 'run')
  -- The money first: the increments the store could refuse (a total past 64 bits) come before
  -- any other write.
  if ARGV[6] ~= '0' then redis.call('HINCRBY', run, 'cost', ARGV[6]) end
  if ARGV[5] ~= '0' then redis.call('HINCRBY', run, 'cost_held', '-' .. ARGV[5]) end
  local used_in = redis.call('HINCRBY', run, 'input_tokens', ARGV[7])
  local used_out = redis.call('HINCRBY', run, 'output_tokens', ARGV[8])
  local l = redis.call('HMGET', run, 'l_input_tokens', 'l_output_tokens', 'l_total_tokens',
    'l_cost', 'cost', 'cost_held')
  local settled, held = l[5] or '0', l[6] or '0'
  local over = tokens_over(used_in, used_out, l)
  if over then
    overs[i] = {over[1], text('tokens', {limit = over[2], used = over[3]})}
  elseif not within_cost(l[4], settled, held, '0') then
    overs[i] = {'cost', text('cost', {limit = dollars(l[4]), settled = dollars(settled),
      held = dollars(held)})}
  end
end
exhaust_levels(path, overs, 'settle', ARGV[4])
expire_ops()
return status(ENDED_NOW and 'ended_now' or 'ok')
