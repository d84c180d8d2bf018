-- One call of a Tool: the total and the Tool's own counter move together or not at all.
-- ARGV[4] the Tool's name, ARGV[5] its repr for the reason.
local tool = ARGV[4]
local f = redis.call('HMGET', RUN, 'state', 'deadline', 'budget', 'l_tool_calls',
  'l_per_tool_calls', 'tool_calls')
if not f[1] then return UNKNOWN end
if replayed() then return PASSED end -- granted then: a refusal releases its id
local t = redis.call('HMGET', TOOLS, 'n:' .. tool, 'l:' .. tool)
local limit = t[2] or f[5]
local used = tonumber(t[1] or '0')
local total = tonumber(f[6])
if live(f[1], f[2]) and total < tonumber(f[4]) and used < tonumber(limit) then
  redis.call('HINCRBY', RUN, 'tool_calls', 1)
  redis.call('HINCRBY', TOOLS, 'n:' .. tool, 1)
  return grant(f[3])
end
if total >= tonumber(f[4]) then
  return refuse('TOOL', f[1], f[2], 'tool_calls',
    text('tool_calls', {limit = f[4], call = total + 1, tool = ARGV[5]}))
end
return refuse('TOOL', f[1], f[2], 'per_tool_calls',
  text('per_tool_calls', {limit = limit, tool = ARGV[5], call = used + 1}))
