-- ctx.check(boundary): pass while live; else time the run out if it is live and past the
-- deadline (its live descendants cascade). ARGV[4] the boundary's name.
local f = redis.call('HMGET', RUN, 'state', 'deadline')
if not f[1] then return UNKNOWN end
if live(f[1], f[2]) then return PASSED end
time_out(ARGV[4])
return status(ENDED_NOW and 'ended_now' or 'ended')
