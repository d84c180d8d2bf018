-- n bytes of the run's byte budget, all or nothing. ARGV[4] n.
local f = redis.call('HMGET', RUN, 'state', 'deadline', 'budget', 'l_run_bytes', 'run_bytes')
if not f[1] then return UNKNOWN end
if replayed() then return PASSED end -- granted then: a refusal releases its id
if live(f[1], f[2]) and tonumber(f[5]) + tonumber(ARGV[4]) <= tonumber(f[4]) then
  redis.call('HINCRBY', RUN, 'run_bytes', ARGV[4])
  return grant(f[3])
end
return refuse('CAPACITY', f[1], f[2], 'run_bytes',
  text('run_bytes', {limit = f[4], n = ARGV[4], used = f[5]}))
