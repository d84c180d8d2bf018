-- n bytes of the byte budget of the caller's run and every ancestor, lowest first: all or
-- nothing. ARGV[4] n.
local f = redis.call('HMGET', RUN, 'state', 'deadline', 'budget', 'path')
if not f[1] then return UNKNOWN end
if replayed() then return PASSED end -- granted then: a refusal releases its id
local path = path_of(SELF_ID, f[4])
if not live(f[1], f[2]) then return refuse('CAPACITY', f[1], f[2]) end
for i, id in ipairs(path) do
  local l = redis.call('HMGET', key_of(id, 'run'), 'l_run_bytes', 'run_bytes')
  if tonumber(l[2]) + tonumber(ARGV[4]) > tonumber(l[1]) then
    return refuse('CAPACITY', f[1], f[2], path, i, 'run_bytes',
      text('run_bytes', {limit = l[1], n = ARGV[4], used = l[2]}))
  end
end
for _, id in ipairs(path) do redis.call('HINCRBY', key_of(id, 'run'), 'run_bytes', ARGV[4]) end
return grant(f[3])
