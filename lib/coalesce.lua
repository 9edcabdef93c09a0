-- Calls that many coroutines of one worker make in the same turn of its
-- loop, gathered into one: the first caller lets the turn's other
-- coroutines run (sched.later), then runs the batch for every key gathered
-- meanwhile while they wait on an event, and each gets its own answer.
-- A job worker that claims 500 jobs at once thus starts them with one
-- statement instead of 500 round trips queued on its few connections.
--
-- coalesce.new(run) returns call(key, arg): run(keys, args) gets the keys
-- in the order they came, args[i] the arg that came with keys[i], and
-- returns a table of answers by key. An error of run is
-- raised in every caller of its batch. Every call gets an answer of its own:
-- a key already in the batch being gathered is a batch of its own (two jobs
-- starting the same target must not both be told it started), as is a call
-- where a coroutine cannot wait (a nested coroutine, code outside the loop).
local M = {}

function M.new(run)
  local open -- the batch still gathering keys, until its first caller goes on

  local function run_alone(key, arg)
    return run({ key }, { arg })[key]
  end

  return function(key, arg)
    local batch = open
    if not sched.waitable() or (batch and batch.seen[key]) then return run_alone(key, arg) end
    if batch then
      local n = #batch.keys + 1
      batch.seen[key] = true
      batch.keys[n], batch.args[n] = key, arg
      batch.done:wait()
    else
      batch = { keys = { key }, args = { arg }, seen = { [key] = true }, done = sched.event() }
      open = batch
      sched.later()
      open = nil
      batch.ok, batch.answers = pcall(run, batch.keys, batch.args)
      batch.done:set()
    end
    if not batch.ok then error(batch.answers, 0) end
    return batch.answers[key]
  end
end

-- coalesce.single_flight(fn) returns call(key, ...): while fn(key, ...) runs
-- for a key (it may wait: a call to the platform), the worker's other
-- coroutines that call for the same key wait for it and get its results,
-- instead of asking again (500 Instagram attempts starting together read
-- their 10 accounts' publishing quota 10 times, not 500). An error of fn
-- is raised in each of them. Where a coroutine cannot wait, it calls fn.
function M.single_flight(fn)
  local running = {}
  return function(key, ...)
    local flight = running[key]
    if flight and sched.waitable() then
      flight.done:wait()
    else
      -- A caller that cannot wait for a flight under way makes its own,
      -- which must not take that flight's place.
      local mine = not flight
      flight = { done = sched.event() }
      if mine then running[key] = flight end
      flight.results = table.pack(pcall(fn, key, ...))
      if mine then running[key] = nil end
      flight.done:set()
    end
    if not flight.results[1] then error(flight.results[2], 0) end
    return table.unpack(flight.results, 2, flight.results.n)
  end
end

return M
