-- A completed Model response's usage, recorded as reported even past a limit (which then
-- exhausts the budget and ends the run). ARGV[4] input tokens, ARGV[5] output tokens.
if redis.call('EXISTS', RUN) == 0 then return UNKNOWN end
if replayed() then return status('ok') end
local used_in = redis.call('HINCRBY', RUN, 'input_tokens', ARGV[4])
local used_out = redis.call('HINCRBY', RUN, 'output_tokens', ARGV[5])
local l = redis.call('HMGET', RUN, 'l_input_tokens', 'l_output_tokens', 'l_total_tokens', 'budget')
local over = nil
if used_in > tonumber(l[1]) then
  over = {'input_tokens', l[1], used_in}
elseif used_out > tonumber(l[2]) then
  over = {'output_tokens', l[2], used_out}
elseif used_in + used_out > tonumber(l[3]) then
  over = {'total_tokens', l[3], used_in + used_out}
end
if over then
  exhaust('record_usage', over[1], text('tokens', {limit = over[2], used = over[3]}))
else
  local target = take(BUDGET, l[4], 'record_usage', 'true')
  if target then redis.call('HSET', RUN, 'budget', target) end
end
expire_ops()
return status(ENDED_NOW and 'ended_now' or 'ok')
