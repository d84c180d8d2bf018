-- Publish a new run, refusing an ID the store holds. ARGV[4..] field, value pairs of the run's
-- hash; after the token '--limits--', Tool, limit pairs of its per-Tool overrides.
if redis.call('EXISTS', RUN) == 1 then return {'exists'} end
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
return {'ok'}
