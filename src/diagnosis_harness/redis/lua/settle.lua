-- A call's settle: its actual cost (integer picodollars, rounded up) and tokens recorded as
-- reported, and its hold released, in one step -- even past a limit (which then exhausts the
-- budget and ends the run) and after the run ended (the call it paid for happened).
-- ARGV[4] the call's boundary (MODEL or TOOL), ARGV[5] its hold, ARGV[6] the cost, ARGV[7]
-- input tokens, ARGV[8] output tokens.
if redis.call('EXISTS', RUN) == 0 then return UNKNOWN end
if replayed() then return status('ok') end
-- The money first: the increments the store could refuse (a total past 64 bits) come before
-- any other write.
if ARGV[6] ~= '0' then redis.call('HINCRBY', RUN, 'cost', ARGV[6]) end
if ARGV[5] ~= '0' then redis.call('HINCRBY', RUN, 'cost_held', '-' .. ARGV[5]) end
local used_in = redis.call('HINCRBY', RUN, 'input_tokens', ARGV[7])
local used_out = redis.call('HINCRBY', RUN, 'output_tokens', ARGV[8])
local l = redis.call('HMGET', RUN, 'l_input_tokens', 'l_output_tokens', 'l_total_tokens', 'budget',
  'l_cost', 'cost', 'cost_held')
local settled, held = l[6] or '0', l[7] or '0'
local over = tokens_over(used_in, used_out, l)
if over then
  exhaust('settle', over[1], text('tokens', {limit = over[2], used = over[3]}))
elseif not within_cost(l[5], settled, held, '0') then
  exhaust('settle', 'cost', text('cost', {limit = dollars(l[5]), settled = dollars(settled),
    held = dollars(held)}), ARGV[4])
else
  local target = take(BUDGET, l[4], 'settle', 'true')
  if target then redis.call('HSET', RUN, 'budget', target) end
end
expire_ops()
return status(ENDED_NOW and 'ended_now' or 'ok')
