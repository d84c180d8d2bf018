-- Publish a child of a live run of this tree, its ID claimed already (claim.lua). KEYS: the
-- child's, under the root's hash tag. ARGV[4] the parent's ID, ARGV[5] the child's deadline on
-- the tree's timeline (kept at most the parent's), ARGV[6..] field, value pairs of the child's
-- hash; after the token '--limits--', Tool, limit pairs of its per-Tool overrides. The child
-- takes the parent's session, timeline and expiry; its 'path' is the parent's ID then the
-- parent's path; 'priced' says it or an ancestor has a money limit. Answers Created (ok, or
-- exists), the parent's Status (ended) when the parent has ended -- the caller raises the
-- parent's ending -- or UNKNOWN when the parent is not stored.
local parent = ARGV[4]
local p = redis.call('HMGET', key_of(parent, 'run'), 'state', 'deadline', 'session_id',
  'origin_ns', 'ttl_ms', 'path', 'priced', 'l_cost')
if not p[1] then return UNKNOWN end
if redis.call('EXISTS', RUN) == 1 then
  -- this call sent again (its answer was lost) published it; else the ID is taken
  local again = OP ~= '' and redis.call('HGET', RUN, 'created_by') == OP
  return answer('Created', {code = again and 'ok' or 'exists'})
end
if p[1] ~= LIFECYCLE.initial then return status('ended', parent) end
local deadline = ARGV[5]
if tonumber(p[2]) < tonumber(deadline) then deadline = p[2] end
local path = parent
if p[6] then path = parent .. ' ' .. p[6] end
redis.call('HSET', RUN, 'created_by', OP, 'session_id', p[3], 'origin_ns', p[4], 'ttl_ms', p[5],
  'deadline', deadline, 'parent', parent, 'path', path)
local i = 6
while ARGV[i] ~= '--limits--' do
  redis.call('HSET', RUN, ARGV[i], ARGV[i + 1])
  i = i + 2
end
i = i + 1
while ARGV[i] do
  redis.call('HSET', TOOLS, 'l:' .. ARGV[i], ARGV[i + 1])
  i = i + 2
end
local priced = p[7] == '1' or (p[8] and p[8] ~= '') or redis.call('HEXISTS', RUN, 'l_cost') == 1
redis.call('HSET', RUN, 'state', LIFECYCLE.initial, 'budget', BUDGET.initial,
  'priced', priced and '1' or '0')
redis.call('RPUSH', key_of(parent, 'children'), SELF_ID)
return answer('Created', {code = 'ok'})
