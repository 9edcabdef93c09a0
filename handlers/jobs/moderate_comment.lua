-- Job: one attempt at a reply, hide, unhide or delete (lib/moderation.lua).
local moderation = require "moderation"

return function(payload, job)
  return moderation.run(payload, job.attempts)
end
