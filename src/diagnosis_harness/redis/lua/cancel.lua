-- cancel(reason): the first reason wins, and the ending it records is one decision with it, and
-- with the cascade to the run's live descendants.
-- ARGV[4] the reason, ARGV[5] the event it ends the run with, ARGV[6] the ending's reason text.
if redis.call('EXISTS', RUN) == 0 then return UNKNOWN end
if redis.call('HSETNX', RUN, 'signal', ARGV[4]) == 0 then
  -- the first reason is another call's, or this call's sent again (its answer was lost)
  local again = OP ~= '' and redis.call('HGET', RUN, 'signalled_by') == OP
  return status(again and 'ended_now' or 'ended')
end
redis.call('HSET', RUN, 'signalled_by', OP)
end_run(ARGV[5], ARGV[6], NOW)
return status('ended_now')
