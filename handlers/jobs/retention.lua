-- Job (timer retention): creates the day partitions ahead and drops the old
-- ones (lib/partitions.lua), deletes what is older than its retention
-- (lib/retention.lua), a batch of each kind per run; while batches come back
-- full, runs again at once rather than holding one job slice for a backlog.
local retention = require "retention"

return function()
  local deleted, more = retention.run()
  if next(deleted) then log.info("retention_deleted", deleted) end
  if more then return { retry_in = 1 } end
end
