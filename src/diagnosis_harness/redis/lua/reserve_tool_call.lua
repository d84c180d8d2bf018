-- One call of a Tool and its money hold: the total, the Tool's own counter and the hold move
-- together or not at all. ARGV[4] the Tool's name, ARGV[5] its repr for the reason, ARGV[6] the
-- hold (integer picodollars, the call's max_cost rounded up; '0' for none).
local tool = ARGV[4]
local f = redis.call('HMGET', RUN, 'state', 'deadline', 'budget', 'l_tool_calls',
  'l_per_tool_calls', 'tool_calls', 'l_cost', 'cost', 'cost_held')
if not f[1] then return UNKNOWN end
if replayed() then return PASSED end -- granted then: a refusal releases its id
local t = redis.call('HMGET', TOOLS, 'n:' .. tool, 'l:' .. tool)
local limit = t[2] or f[5]
local used = tonumber(t[1] or '0')
local total = tonumber(f[6])
local hold = ARGV[6] or '0' -- none sent: no hold
if live(f[1], f[2]) and total < tonumber(f[4]) and used < tonumber(limit)
    and within_cost(f[7], f[8], f[9], hold) then
  if hold ~= '0' then redis.call('HINCRBY', RUN, 'cost_held', hold) end
  redis.call('HINCRBY', RUN, 'tool_calls', 1)
  redis.call('HINCRBY', TOOLS, 'n:' .. tool, 1)
  return grant(f[3])
end
if used < tonumber(limit) and total < tonumber(f[4]) and f[7] and f[7] ~= '' then
  return refuse('TOOL', f[1], f[2], 'cost', cost_refused(f[7], f[8], f[9], hold))
end
if total >= tonumber(f[4]) then
  return refuse('TOOL', f[1], f[2], 'tool_calls',
    text('tool_calls', {limit = f[4], call = total + 1, tool = ARGV[5]}))
end
return refuse('TOOL', f[1], f[2], 'per_tool_calls',
  text('per_tool_calls', {limit = limit, tool = ARGV[5], call = used + 1}))
