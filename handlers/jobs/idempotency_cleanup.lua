-- Deletes expired Idempotency-Keys in batches. A claim never depends on it
-- (an expired key is replaced when it is used again); it only keeps the table
-- small. A full batch means more are waiting: run again soon rather than
-- holding one job slice for a large backlog.
local idempotency = require "idempotency"

return function()
  if idempotency.cleanup(idempotency.CLEANUP_BATCH) >= idempotency.CLEANUP_BATCH then
    return { retry_in = 1 }
  end
end
