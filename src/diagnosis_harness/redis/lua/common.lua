-- Shared by every operation's function; loaded after the prelude, which _scripts.py renders from
-- the generated tables (model/budget.toml, model/lifecycle.toml), ENDINGS, the reason texts and
-- the answers' fields (_protocol.py): BUDGET, LIFECYCLE, SIGNAL, take(), text(), answer(), UNKNOWN
-- and PASSED. No state name, transition, reason's wording or answer's field order is written here
-- by hand.
--
-- KEYS: the run's hash, its per-Tool hash (a Tool's count in 'n:<tool>', its own limit, if it
-- has one, in 'l:<tool>': one read for both), the ids of the operations it applied, its capacity
-- counter -- one hash tag, one Cluster slot.
-- ARGV[1] the channel an ending is published on, ARGV[2] this operation's id (a retried call
-- sends the same one), ARGV[3] the boundary's clock reading on the run's timeline (ns).
-- Times are strings of integer nanoseconds; they go through tonumber() only to be compared.
-- begin() sets these for the call: the server runs one function at a time, to its end.
local RUN, TOOLS, OPS, CHANNEL, OP, NOW, ALL_KEYS
local ENDED_NOW = false -- set when this call recorded the run's ending

local function begin(keys, args)
  RUN, TOOLS, OPS = keys[1], keys[2], keys[3]
  CHANNEL, OP, NOW = args[1], args[2], args[3]
  ALL_KEYS = keys
  ENDED_NOW = false
end

-- What a caller learns of the run, as a table of the Status answer's fields (nil: no run).
-- 'ended' is 'ended_now' for the operation whose id recorded the ending: a call sent again
-- (its answer was lost) learns that it was the one.
local function status_fields(code)
  local f = redis.call('HMGET', RUN, 'state', 'reason', 'at', 'signal', 'exhausted', 'budget',
    'boundary', 'ended_by')
  if not f[1] then return nil end
  if code == 'ended' and OP ~= '' and f[8] == OP then code = 'ended_now' end
  return {code = code, state = f[1], reason = f[2] or '', at = f[3] or '', signal = f[4] or '',
    exhausted = f[5] or '', budget = f[6], boundary = f[7] or ''}
end

local function status(code)
  local fields = status_fields(code)
  return fields and answer('Status', fields) or UNKNOWN
end

-- An operation that is not idempotent (a grant, a usage report) runs once per id: the id is
-- claimed first (a retried call finds it and changes nothing) and released if nothing was done.
local function replayed()
  return redis.call('HSETNX', OPS, OP, 1) == 0
end

local function release()
  if OP ~= '' then redis.call('HDEL', OPS, OP) end
end

local function expire_all()
  local ttl = redis.call('HGET', RUN, 'ttl_ms')
  for _, key in ipairs(ALL_KEYS) do redis.call('PEXPIRE', key, ttl) end
end

-- Ids claimed after the run ended expire with its other keys.
local function expire_ops()
  if redis.call('HGET', RUN, 'state') ~= LIFECYCLE.initial then
    redis.call('PEXPIRE', OPS, redis.call('HGET', RUN, 'ttl_ms'))
  end
end

-- Record the ending `event` leads to, unless the run has ended; the first ending wins.
-- `boundary`: the one that decided it (a Boundary's name), nil for an ending decided elsewhere.
local function end_run(event, reason, at, boundary)
  local target = take(LIFECYCLE, redis.call('HGET', RUN, 'state'), event, 'none')
  if not target then return false end
  redis.call('HSET', RUN, 'state', target, 'reason', reason, 'at', at, 'ended_by', OP,
    'boundary', boundary or '')
  local signal = SIGNAL[event]
  if signal then redis.call('HSETNX', RUN, 'signal', signal) end
  expire_all()
  redis.call('PUBLISH', CHANNEL, target)
  ENDED_NOW = true
  return true
end

local function live(state, deadline)
  return state == LIFECYCLE.initial and tonumber(NOW) < tonumber(deadline)
end

-- `ns` (>= 0) nanoseconds as a person reads them, as the core words them (_endings.py
-- seconds_text): to the millisecond, truncated, or exactly below one millisecond.
local function seconds_text(ns)
  local whole, fraction = math.floor(ns / 1e9), ns % 1e9
  if ns >= 1e6 then
    return string.format('%d.%03d s', whole, math.floor(fraction / 1e6))
  end
  local text = string.format('0.%09d', fraction):gsub('0+$', ''):gsub('%.$', '')
  return text .. ' s'
end

-- The run is past its deadline, seen by `boundary`: TIMED_OUT, worded as the core words it
-- (_endings.py deadline_reason): how far past, in seconds, and which boundary looked.
local function time_out(boundary)
  local late = tonumber(NOW) - tonumber(redis.call('HGET', RUN, 'deadline'))
  end_run('time_out', text('deadline_exceeded', {late = seconds_text(late), boundary = boundary}),
    NOW, boundary)
end

-- The refused reservation or the usage past a limit: EXHAUSTED, and the run ends, decided at
-- the limit's own boundary (LIMIT_BOUNDARY); the money limit at the boundary of the call whose
-- hold or settle reached it (`boundary`, a Boundary's name), as the run in one process decides.
local function exhaust(event, dimension, detail, boundary)
  local target = take(BUDGET, redis.call('HGET', RUN, 'budget'), event, 'false')
  if not target then return end -- exhausted already; the run ended then
  redis.call('HSET', RUN, 'budget', target, 'exhausted', dimension)
  if dimension ~= 'cost' or not boundary then boundary = LIMIT_BOUNDARY[dimension] end
  end_run('exhaust_budget', text('limit', {dimension = dimension, detail = detail}), NOW,
    boundary)
end

-- Money. Amounts are integer picodollars, kept as Redis integers (HINCRBY: exact in 64 bits)
-- and read back as strings of digits, so a text writes them exactly. Lua numbers are doubles:
-- a comparison of settled + held + hold with the limit is exact because the store refuses a
-- money limit of 2^53 picodollars or more (every sum at or below the limit is an exact double,
-- and a true sum above it rounds to a double above it: rounding is monotonic).
-- `limit` is false or '' when the run has no money limit.
-- The first token limit the tokens used pass, as {dimension, limit, used}; nil within them.
-- `limits` are the run's l_input_tokens, l_output_tokens and l_total_tokens, in that order.
local function tokens_over(used_in, used_out, limits)
  if used_in > tonumber(limits[1]) then return {'input_tokens', limits[1], used_in} end
  if used_out > tonumber(limits[2]) then return {'output_tokens', limits[2], used_out} end
  if used_in + used_out > tonumber(limits[3]) then
    return {'total_tokens', limits[3], used_in + used_out}
  end
  return nil
end

local function within_cost(limit, settled, held, hold)
  if not limit or limit == '' then return true end
  return tonumber(settled or '0') + tonumber(held or '0') + tonumber(hold) <= tonumber(limit)
end

-- As much of `hold` as the money left pays for (all of it without a money limit), as a string
-- of digits; the caller has checked that at least its least hold fits (within_cost), so the
-- money left is >= 0 and below 2**53, formatted exactly.
local function affordable(limit, settled, held, hold)
  if not limit or limit == '' then return hold end
  local room = tonumber(limit) - tonumber(settled or '0') - tonumber(held or '0')
  if tonumber(hold) <= room then return hold end
  return string.format('%.0f', room)
end

-- `units` (a string of decimal digits) picodollars as the core writes dollars in a reason
-- (`$` and str() of the normalised Decimal, _limits.dollars): a whole number plainly, else
-- without trailing zeros, in exponent notation when below 10^-6 as Python's Decimal does.
local function dollars(units)
  units = string.gsub(units, '^0+', '')
  if units == '' then return '$0' end
  local digits = string.gsub(units, '0+$', '')
  local exponent = #units - #digits - 12 -- value = digits * 10^exponent
  if exponent >= 0 then return '$' .. digits .. string.rep('0', exponent) end
  local adjusted = exponent + #digits - 1
  if adjusted >= -6 then
    local point = #digits + exponent -- digits before the point
    if point > 0 then
      return '$' .. string.sub(digits, 1, point) .. '.' .. string.sub(digits, point + 1)
    end
    return '$0.' .. string.rep('0', -point) .. digits
  end
  local mantissa = string.sub(digits, 1, 1)
  if #digits > 1 then mantissa = mantissa .. '.' .. string.sub(digits, 2) end
  return '$' .. mantissa .. 'E' .. string.format('%d', adjusted)
end

-- The detail of a hold the money limit refused: the hold against what is settled and held.
local function cost_refused(limit, settled, held, hold)
  return text('cost_refused', {limit = dollars(limit), hold = dollars(hold),
    settled = dollars(settled or '0'), held = dollars(held or '0')})
end

-- A reservation not granted: the run is over or past its deadline, else the limit refused it.
local function refuse(boundary, state, deadline, dimension, detail)
  release()
  if live(state, deadline) then
    exhaust('reserve', dimension, detail, boundary)
  else
    time_out(boundary)
  end
  return status(ENDED_NOW and 'ended_now' or 'ended')
end

-- A grant: the budget steps by the table (ACTIVE -> ACTIVE: written only if it moved).
local function grant(budget)
  local target = take(BUDGET, budget, 'reserve', 'true')
  if target ~= budget then redis.call('HSET', RUN, 'budget', target) end
  return PASSED
end
