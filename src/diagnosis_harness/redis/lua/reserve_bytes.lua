-- n bytes of the run's byte budget, all or nothing. ARGV[4] n.
local f = redis.call('HMGET', RUN, 'state', 'deadline', 'budget', 'l_run_bytes', 'run_bytes')
if not f[1] then return {'unknown'} end
if replayed() then return status('ok') end
if live(f[1], f[2]) and tonumber(f[5]) + tonumber(ARGV[4]) <= tonumber(f[4]) then
  redis.call('HINCRBY', RUN, 'run_bytes', ARGV[4])
  return grant(f[3])
end
return refuse('CAPACITY', f[1], f[2], 'run_bytes',
  f[4] .. ' would be passed: ' .. ARGV[4] .. ' more bytes refused (' .. f[5] .. ' used)')
