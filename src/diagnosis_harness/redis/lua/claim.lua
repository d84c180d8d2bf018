-- The ID of a child run, claimed under its own hash tag before the child is written under its
-- root's (create_child.lua): the index `{ns}:{id}:root`, a hash of 'root' (the tree's root ID)
-- and 'created_by' (the claiming operation's id), by which an attach finds the tree. KEYS: the
-- keys a root run of this ID would have (so one ID is one claim, root or child, store-wide).
-- ARGV[4] the root's ID, ARGV[5] how long the index lives (ms: the child's deadline plus the
-- store's expire_after), ARGV[6] 'claim', or 'release' (a child the tree refused: the claim of
-- this operation's id is dropped). Answers Created: ok, or exists (the ID is taken).
local INDEX = TREE .. ':root'
if ARGV[6] == 'release' then
  if OP ~= '' and redis.call('HGET', INDEX, 'created_by') == OP then redis.call('DEL', INDEX) end
  return answer('Created', {code = 'ok'})
end
if redis.call('EXISTS', RUN) == 1 then return answer('Created', {code = 'exists'}) end
local by = redis.call('HGET', INDEX, 'created_by')
if by then
  -- this call sent again (its answer was lost) claimed it; else the ID is taken
  return answer('Created', {code = (OP ~= '' and by == OP) and 'ok' or 'exists'})
end
redis.call('HSET', INDEX, 'root', ARGV[4], 'created_by', OP)
redis.call('PEXPIRE', INDEX, ARGV[5])
return answer('Created', {code = 'ok'})
