-- A completed Model response's usage, recorded as reported at the caller's run and every
-- ancestor, even past a limit (which then exhausts the budget and ends the path up to the
-- highest level past one: exhaust_levels). ARGV[4] input tokens, ARGV[5] output tokens.
local f = redis.call('HMGET', RUN, 'state', 'path')
if not f[1] then return UNKNOWN end
if replayed() then return status('ok') end
local path = path_of(SELF_ID, f[2])
local overs = {}
for i, id in ipairs(path) do
  local run = key_of(id, 'run')
  local used_in = redis.call('HINCRBY', run, 'input_tokens', ARGV[4])
  local used_out = redis.call('HINCRBY', run, 'output_tokens', ARGV[5])
  local l = redis.call('HMGET', run, 'l_input_tokens', 'l_output_tokens', 'l_total_tokens')
  local over = tokens_over(used_in, used_out, l)
  if over then overs[i] = {over[1], text('tokens', {limit = over[2], used = over[3]})} end
end
exhaust_levels(path, overs, 'record_usage')
expire_ops()
return status(ENDED_NOW and 'ended_now' or 'ok')
