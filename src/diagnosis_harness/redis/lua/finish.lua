-- SUCCEED or FAIL unless the run has ended; its live descendants cascade. ARGV[4] the event,
-- ARGV[5] the reason.
if redis.call('EXISTS', RUN) == 0 then return UNKNOWN end
end_run(ARGV[4], ARGV[5], NOW)
return status(ENDED_NOW and 'ended_now' or 'ended')
