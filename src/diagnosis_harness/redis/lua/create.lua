-- Publish a new root run, refusing an ID the store holds: a root's (its hash) or a child's (the
-- index a child's creation claims under the ID's own hash tag, claim.lua). ARGV[4..] field,
-- value pairs of the run's hash; after the token '--limits--', Tool, limit pairs of its
-- per-Tool overrides.
if redis.call('EXISTS', RUN) == 1 then
  -- this call sent again (its answer was lost) published it; else the ID is taken
  local again = OP ~= '' and redis.call('HGET', RUN, 'created_by') == OP
  return answer('Created', {code = again and 'ok' or 'exists'})
end
if redis.call('EXISTS', TREE .. ':root') == 1 then return answer('Created', {code = 'exists'}) end
redis.call('HSET', RUN, 'created_by', OP)
local i = 4
while ARGV[i] ~= '--limits--' do
  redis.call('HSET', RUN, ARGV[i], ARGV[i + 1])
  i = i + 2
end
i = i + 1
while ARGV[i] do
  redis.call('HSET', TOOLS, 'l:' .. ARGV[i], ARGV[i + 1])
  i = i + 2
end
redis.call('HSET', RUN, 'state', LIFECYCLE.initial, 'budget', BUDGET.initial)
return answer('Created', {code = 'ok'})
