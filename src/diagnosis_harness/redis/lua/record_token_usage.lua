-- A completed Model response's usage, recorded as reported even past a limit (which then
-- exhausts the budget and ends the run). ARGV[4] input tokens, ARGV[5] output tokens.
if redis.call('EXISTS', RUN) == 0 then return UNKNOWN end
if replayed() then return status('ok') end
local used_in = redis.call('HINCRBY', RUN, 'input_tokens', ARGV[4])
local used_out = redis.call('HINCRBY', RUN, 'output_tokens', ARGV[5])
local l = redis.call('HMGET', RUN, 'l_input_tokens', 'l_output_tokens', 'l_total_tokens', 'budget')
local over = tokens_over(used_in, used_out, l)
if over then
  exhaust('record_usage', over[1], text('tokens', {limit = over[2], used = over[3]}))
else
  local target = take(BUDGET, l[4], 'record_usage', 'true')
  if target then redis.call('HSET', RUN, 'budget', target) end
end
expire_ops()
return status(ENDED_NOW and 'ended_now' or 'ok')
