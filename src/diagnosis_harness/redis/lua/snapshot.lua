-- Every counter, read in one step: {status..., model, tools, in, out, bytes, tool, n, ...}.
local tools = redis.call('HGETALL', TOOLS)
local s = status('ok')
if s[1] == 'unknown' then return s end
local c = redis.call('HMGET', RUN, 'model_calls', 'tool_calls', 'input_tokens',
  'output_tokens', 'run_bytes')
for _, v in ipairs(c) do s[#s + 1] = v end
for i = 1, #tools, 2 do
  if string.sub(tools[i], 1, 2) == 'n:' then
    s[#s + 1] = string.sub(tools[i], 3)
    s[#s + 1] = tools[i + 1]
  end
end
return s
