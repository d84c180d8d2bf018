-- Shared by every operation's function; loaded after the prelude, which _scripts.py renders from
-- the generated tables (model/budget.toml, model/lifecycle.toml), ENDINGS, the reason texts and
-- the answers' fields (_protocol.py): BUDGET, LIFECYCLE, SIGNAL, CASCADE, take(), text(),
-- answer(), UNKNOWN and PASSED. No state name, transition, reason's wording or answer's field
-- order is written here by hand.
--
-- KEYS: the run's hash, its per-Tool hash (a Tool's count in 'n:<tool>', its own limit, if it
-- has one, in 'l:<tool>': one read for both), the ids of the operations it applied, its capacity
-- counter, its children's IDs -- one hash tag, one Cluster slot.
-- ARGV[1] the channel the caller's run's ending is published on (each run's is key_of(id,
-- 'ended'), which is this one for the caller), ARGV[2] this operation's id (a retried call sends
-- the same one), ARGV[3] the boundary's clock reading on the run's timeline (ns).
-- Times are strings of integer nanoseconds; they go through tonumber() only to be compared.
--
-- A run tree. Every run of a tree lives under its root's hash tag: the root's keys are
-- `{ns}:{root}:<part>`, a child's `{ns}:{root}:<child>:<part>` (run IDs are safe segments: no
-- ':' and no braces), so a function reaches every run of the tree from the tag (key_of), all in
-- one slot. A child's hash keeps 'parent' and 'path' (its ancestors, parent first, root last,
-- space-separated); a run's children are the list `<its base>:children`, oldest first. Every run
-- shares the root's timeline. Invariant, kept by every function: an ended run has no live
-- descendant (an ending cascades in the same call, see end_run_of()).
-- begin() sets these for the call: the server runs one function at a time, to its end.
local RUN, TOOLS, OPS, CHANNEL, OP, NOW
local TREE, ROOT_ID, SELF_ID -- `{ns}:{root}`, the root's ID, the caller's run's ID
local ENDED_NOW = false -- set when this call recorded the caller's run's ending

local PARTS = {'run', 'tools', 'ops', 'capacity', 'children'} -- a run's keys, as KEYS has them

-- The key `part` of the run `id` of this tree.
local function key_of(id, part)
  if id == ROOT_ID then return TREE .. ':' .. part end
  return TREE .. ':' .. id .. ':' .. part
end

local function children_of(id)
  return redis.call('LRANGE', key_of(id, 'children'), 0, -1)
end

-- A function of a tree reads and writes keys of other runs than the caller's, which the call does
-- not declare. While the tree's slot migrates to another Cluster node, a touch of such a key that
-- is not here (moved already, or never made) stops the script with an error: touch them all
-- first, so that it stops before it writes anything, and the store sends it again until the
-- slot has moved. A root without children touches only its declared keys.
local function touch_tree()
  local function touch(id)
    for _, part in ipairs(PARTS) do redis.call('EXISTS', key_of(id, part)) end
    for _, child in ipairs(children_of(id)) do touch(child) end
  end
  touch(ROOT_ID)
end

local function begin(keys, args)
  RUN, TOOLS, OPS = keys[1], keys[2], keys[3]
  CHANNEL, OP, NOW = args[1], args[2], args[3]
  TREE = string.match(RUN, '^[^{]*{[^}]*}')
  ROOT_ID = string.sub(string.match(TREE, '{[^}]*}$'), 2, -2)
  if RUN == TREE .. ':run' then SELF_ID = ROOT_ID else SELF_ID = string.sub(RUN, #TREE + 2, -5) end
  ENDED_NOW = false
  if SELF_ID ~= ROOT_ID or redis.call('EXISTS', keys[5]) == 1 then touch_tree() end
end

-- The run `id` and its ancestors, nearest first: {id, parent, ..., root}. `path` is its stored
-- 'path' field (nil for a root).
local function path_of(id, path)
  local ids = {id}
  if path then
    for ancestor in string.gmatch(path, '%S+') do ids[#ids + 1] = ancestor end
  end
  return ids
end

-- What a caller learns of the run, as a table of the Status answer's fields (nil: no run).
-- 'ended' is 'ended_now' for the operation whose id recorded the ending: a call sent again
-- (its answer was lost) learns that it was the one.
local function status_fields(code, id)
  local f = redis.call('HMGET', id and key_of(id, 'run') or RUN, 'state', 'reason', 'at',
    'signal', 'exhausted', 'budget', 'boundary', 'ended_by')
  if not f[1] then return nil end
  if code == 'ended' and OP ~= '' and f[8] == OP then code = 'ended_now' end
  return {code = code, state = f[1], reason = f[2] or '', at = f[3] or '', signal = f[4] or '',
    exhausted = f[5] or '', budget = f[6], boundary = f[7] or ''}
end

local function status(code, id)
  local fields = status_fields(code, id)
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

-- The root has ended: so has every run of the tree (the invariant).
local function tree_ended()
  return redis.call('HGET', key_of(ROOT_ID, 'run'), 'state') ~= LIFECYCLE.initial
end

-- Every key of the tree expires ttl after the root's ending: a child that ended stays readable,
-- in its parent's snapshot and by its own owners, while the tree lives.
local function expire_tree()
  local ttl = redis.call('HGET', key_of(ROOT_ID, 'run'), 'ttl_ms')
  local function expire(id)
    for _, part in ipairs(PARTS) do
      redis.call('PEXPIRE', key_of(id, part), ttl)
    end
    for _, child in ipairs(children_of(id)) do expire(child) end
  end
  expire(ROOT_ID)
end

-- Ids claimed after the tree ended expire with its other keys.
local function expire_ops()
  if tree_ended() then
    redis.call('PEXPIRE', OPS, redis.call('HGET', key_of(ROOT_ID, 'run'), 'ttl_ms'))
  end
end

-- A run ID as Python's repr() writes it, as the core's reasons name a run: IDs are safe segments,
-- with no quote or backslash to escape.
local function repr(id)
  return "'" .. id .. "'"
end

-- Record the ending `event` leads to for the run `id`, unless it has ended (the first ending
-- wins), then end each live descendant CANCELLED, signalled CASCADE.signal (PARENT_ENDED), with
-- the reason 'ancestor_ended' naming `origin` (the run whose own ending cascades: `id`, unless
-- this ending is itself a cascade) -- depth first, so every run is published on its channel
-- after its descendants and a process's listener delivers them in that order. The root's ending
-- starts the expiry of every key of the tree. `boundary`: the one that decided it (a Boundary's
-- name), nil for an ending decided elsewhere; `signal`: the reason it signals if not the event's.
local end_run_of
end_run_of = function(id, event, reason, at, boundary, signal, origin)
  local run = key_of(id, 'run')
  local target = take(LIFECYCLE, redis.call('HGET', run, 'state'), event, 'none')
  if not target then return false end
  redis.call('HSET', run, 'state', target, 'reason', reason, 'at', at, 'ended_by', OP,
    'boundary', boundary or '')
  signal = signal or SIGNAL[event]
  if signal then redis.call('HSETNX', run, 'signal', signal) end
  if id == SELF_ID then ENDED_NOW = true end
  origin = origin or id
  local why
  for _, child in ipairs(children_of(id)) do
    if redis.call('HGET', key_of(child, 'run'), 'state') == LIFECYCLE.initial then
      if not why then
        local o = redis.call('HMGET', key_of(origin, 'run'), 'state', 'reason')
        why = text('ancestor_ended', {run = repr(origin), state = o[1], reason = o[2]})
      end
      end_run_of(child, CASCADE.event, why, at, nil, CASCADE.signal, origin)
    end
  end
  redis.call('SPUBLISH', key_of(id, 'ended'), target) -- sharded: the channel is in the tree's slot
  if id == ROOT_ID then expire_tree() end
  return true
end

local function end_run(event, reason, at, boundary)
  return end_run_of(SELF_ID, event, reason, at, boundary)
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
-- (_endings.py deadline_reason): how far past, in seconds, and which boundary looked. Its live
-- descendants cascade (their deadlines are no later: a child's is at most its parent's).
local function time_out(boundary)
  local late = tonumber(NOW) - tonumber(redis.call('HGET', RUN, 'deadline'))
  end_run('time_out', text('deadline_exceeded', {late = seconds_text(late), boundary = boundary}),
    NOW, boundary)
end

-- The run `id` passed (or refused by) its limit of `dimension`, or its ancestor's: EXHAUSTED,
-- and it ends with `reason`, decided at the limit's own boundary (LIMIT_BOUNDARY); the money
-- limit at the boundary of the call whose hold or settle reached it (`boundary`, a Boundary's
-- name), as the run in one process decides. A budget EXHAUSTED already changes nothing (the
-- run ended then).
local function exhaust_one(id, event, dimension, reason, boundary)
  local run = key_of(id, 'run')
  local target = take(BUDGET, redis.call('HGET', run, 'budget'), event, 'false')
  if not target then return end
  redis.call('HSET', run, 'budget', target, 'exhausted', dimension)
  if dimension ~= 'cost' or not boundary then boundary = LIMIT_BOUNDARY[dimension] end
  end_run_of(id, 'exhaust_budget', reason, NOW, boundary)
end

-- A reservation refused, or usage recorded, at the levels of `path` (the caller's run, then its
-- ancestors): `overs[i]` is {dimension, detail} for a level past (or refusing by) one of its own
-- limits, nil for a level within them. Nearest the caller first, so that each ending cascades
-- only to runs off the path: a level over a limit of its own is EXHAUSTED by it and ends; a live
-- level below one that is over ends with the limit of the nearest such level above it (the
-- reason 'ancestor_limit' names that run); any other level's budget steps by the table within
-- its limits (ACTIVE stays, EXHAUSTED absorbs).
local function exhaust_levels(path, overs, event, boundary)
  local nearest, above = {}, nil
  for i = #path, 1, -1 do
    nearest[i] = above
    if overs[i] then above = i end
  end
  for i, id in ipairs(path) do
    local own, source = overs[i], nearest[i]
    local run = key_of(id, 'run')
    if own then
      exhaust_one(id, event, own[1], text('limit', {dimension = own[1], detail = own[2]}),
        boundary)
    elseif source and redis.call('HGET', run, 'state') == LIFECYCLE.initial then
      local over = overs[source]
      exhaust_one(id, event, over[1], text('ancestor_limit',
        {dimension = over[1], run = repr(path[source]), detail = over[2]}), boundary)
    else
      local budget = redis.call('HGET', run, 'budget')
      local target = take(BUDGET, budget, event, 'true')
      if target and target ~= budget then redis.call('HSET', run, 'budget', target) end
    end
  end
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

-- A reservation not granted: the caller's run is over or past its deadline, else the run
-- `path[level]` refused it by its limit of `dimension` (`detail` says how), which exhausts every
-- run of the path up to that one (exhaust_levels).
local function refuse(boundary, state, deadline, path, level, dimension, detail)
  release()
  if live(state, deadline) then
    local overs = {}
    overs[level] = {dimension, detail}
    exhaust_levels(path, overs, 'reserve', boundary)
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
