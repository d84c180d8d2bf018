-- One call of a Tool and its money hold, checked at the caller's run and every ancestor, lowest
-- first: at every level the total, the Tool's own counter and the hold move together, or at none.
-- ARGV[4] the Tool's name, ARGV[5] its repr for the reason, ARGV[6] the hold (integer
-- picodollars, the call's max_cost rounded up; '0' for none).
local tool = ARGV[4]
local f = redis.call('HMGET', RUN, 'state', 'deadline', 'budget', 'path')
if not f[1] then return UNKNOWN end
if replayed() then return PASSED end -- granted then: a refusal releases its id
local hold = ARGV[6] or '0' -- none sent: no hold
local path = path_of(SELF_ID, f[4])
if not live(f[1], f[2]) then return refuse('TOOL', f[1], f[2]) end
for i, id in ipairs(path) do
  local l = redis.call('HMGET', key_of(id, 'run'), 'l_tool_calls', 'l_per_tool_calls', 'tool_calls',
    'l_cost', 'cost', 'cost_held')
  local t = redis.call('HMGET', key_of(id, 'tools'), 'n:' .. tool, 'l:' .. tool)
  local limit = t[2] or l[2]
  local used = tonumber(t[1] or '0')
  local total = tonumber(l[3])
  if not (total < tonumber(l[1]) and used < tonumber(limit)
      and within_cost(l[4], l[5], l[6], hold)) then
    if used < tonumber(limit) and total < tonumber(l[1]) and l[4] and l[4] ~= '' then
      return refuse('TOOL', f[1], f[2], path, i, 'cost', cost_refused(l[4], l[5], l[6], hold))
    end
    if total >= tonumber(l[1]) then
      return refuse('TOOL', f[1], f[2], path, i, 'tool_calls',
        text('tool_calls', {limit = l[1], call = total + 1, tool = ARGV[5]}))
    end
    return refuse('TOOL', f[1], f[2], path, i, 'per_tool_calls',
      text('per_tool_calls', {limit = limit, tool = ARGV[5], call = used + 1}))
  end
end
for _, id in ipairs(path) do
  local run = key_of(id, 'run')
  if hold ~= '0' then redis.call('HINCRBY', run, 'cost_held', hold) end
  redis.call('HINCRBY', run, 'tool_calls', 1)
  redis.call('HINCRBY', key_of(id, 'tools'), 'n:' .. tool, 1)
end
return grant(f[3])
