-- Every counter, read in one step: {status..., model, tools, in, out, bytes, tool, n, ...}.
local s = status('ok')
if s[1] == 'unknown' then return s end
local c = redis.call('HMGET', RUN, 'model_calls', 'tool_calls', 'input_tokens',
  'output_tokens', 'run_bytes')
for _, v in ipairs(c) do s[#s + 1] = v end
for _, v in ipairs(redis.call('HGETALL', TOOLS)) do s[#s + 1] = v end
return s
