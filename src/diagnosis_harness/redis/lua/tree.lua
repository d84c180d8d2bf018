-- The run with its ancestors and its descendants, read in one step: a Tree answer, 'tree' then
-- one entry per run -- the caller's first, then its ancestors nearest first, then its
-- descendants, each after its parent (pre-order, children oldest first). An entry is
-- {run ID, parent ID ('' for the root), the stored limits (JSON), a Snapshot answer}.
local f = redis.call('HMGET', RUN, 'state', 'path')
if not f[1] then return UNKNOWN end
local out = {'tree'}
local function entry(id)
  local run = key_of(id, 'run')
  local fields = status_fields('ok', id)
  local c = redis.call('HMGET', run, 'model_calls', 'tool_calls', 'input_tokens',
    'output_tokens', 'run_bytes', 'cost', 'cost_held', 'parent', 'limits')
  fields.model_calls, fields.tool_calls, fields.input_tokens = c[1] or 0, c[2] or 0, c[3] or 0
  fields.output_tokens, fields.run_bytes = c[4] or 0, c[5] or 0
  fields.cost, fields.cost_held = c[6] or 0, c[7] or 0 -- integer picodollars, as stored
  local s = answer('Snapshot', fields)
  local tools = redis.call('HGETALL', key_of(id, 'tools'))
  for i = 1, #tools, 2 do
    if string.sub(tools[i], 1, 2) == 'n:' then
      s[#s + 1] = string.sub(tools[i], 3)
      s[#s + 1] = tools[i + 1]
    end
  end
  out[#out + 1] = {id, c[8] or '', c[9] or '', s}
end
local path = path_of(SELF_ID, f[2])
for _, id in ipairs(path) do entry(id) end
local function below(id)
  for _, child in ipairs(children_of(id)) do
    entry(child)
    below(child)
  end
end
below(SELF_ID)
return out
