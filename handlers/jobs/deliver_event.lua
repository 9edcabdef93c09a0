-- Job: one attempt at delivering one event to its client's webhook
-- (lib/webhooks.lua). The job's attempt count is the delivery attempt.
local webhooks = require "webhooks"

return function(payload, job)
  return webhooks.deliver(payload.eventId, job.attempts, payload.createdSecond)
end
