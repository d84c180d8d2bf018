-- Every counter, read in one step: a Snapshot answer, then each Tool's (name, count) pairs.
local tools = redis.call('HGETALL', TOOLS)
local fields = status_fields('ok')
if not fields then return UNKNOWN end
local c = redis.call('HMGET', RUN, 'model_calls', 'tool_calls', 'input_tokens',
  'output_tokens', 'run_bytes', 'cost', 'cost_held')
fields.model_calls, fields.tool_calls, fields.input_tokens = c[1] or 0, c[2] or 0, c[3] or 0
fields.output_tokens, fields.run_bytes = c[4] or 0, c[5] or 0
fields.cost, fields.cost_held = c[6] or 0, c[7] or 0 -- integer picodollars, as stored
local s = answer('Snapshot', fields)
for i = 1, #tools, 2 do
  if string.sub(tools[i], 1, 2) == 'n:' then
    s[#s + 1] = string.sub(tools[i], 3)
    s[#s + 1] = tools[i + 1]
  end
end
return s
